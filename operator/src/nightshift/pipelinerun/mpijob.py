"""MPI stages: one Kubeflow MPIJob (v2beta1) per stage attempt, and its status read as a Job's.

Why the MPI Operator and not our own launcher: it already does what an MPI job needs on
Kubernetes and nothing else — per-job SSH keys in a Secret, a hostfile naming every
worker through a headless Service, the launcher created only once every worker is Ready
(`launcherCreationPolicy: WaitForWorkersReady`: no rank starts before all can), the
launcher as a Job whose `backoffLimit` reruns the whole mpirun when a rank fails, and the
workers deleted when it ends. JobSet would give gang start and restarts but leave the
keys, hostfile and mpirun wiring to us.

The planner stays Job-shaped: `as_job` turns an MPIJob's status into the few Job fields
progress.py reads (one item, index 0), so every other rule (records, finality, lost
attempts, events) applies unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nightshift.api import names
from nightshift.pipelinerun import binding, fusewait
from nightshift.pipelinerun import runnerparts as runner
from nightshift.pipelinerun.items import RunRef, attempt_labels, job_name
from nightshift.pipelinerun.jobs import (
    NO_POOL,
    PoolNodes,
    merge_env,
    placement,
    pod_metadata,
    pod_security,
)
from nightshift.pipelinerun.spec import Mpi, PipelineRunSpec, Stage

API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"
LAUNCHER_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}}
WORKER_CONTAINER = "worker"
# The MPI Operator's name for an MPIJob's launcher Job: the MPIJob's, and this.
LAUNCHER_SUFFIX = "-launcher"
# as_job's key for the launcher's Running pods, absent while no launcher is made: a stage
# whose workers all run and whose launcher does not is held by it (stalled.py).
LAUNCHER_RUNNING = "launcherRunning"
# as_job's key for whether the MPI Operator has acted on the MPIJob: its first sync gives
# it a status (a Created condition, a start time), so one without was never synced
# (stalled.py).
OPERATOR_SEEN = "mpiOperatorSeen"
# The MPI Operator mounts the hostfile here (one "name slots=N" line per worker).
HOSTFILE = "/etc/mpi/hostfile"
# Workers Ready is not the same as their names resolving: the headless Service's DNS
# records follow the EndpointSlice a moment later, and an ssh that races them fails the
# whole mpirun ("Could not resolve hostname", kubeflow/mpi-operator#481). So the launcher
# waits, up to two minutes per worker, until each worker's name resolves, then execs
# mpirun unchanged. Plain POSIX sh; an image without getent skips the wait.
DNS_WAIT_SECONDS = 120
DNS_WAIT = (
    "if command -v getent >/dev/null 2>&1 && [ -r " + HOSTFILE + " ]; then"
    " while read -r h _; do i=0;"
    ' until getent hosts "$h" >/dev/null 2>&1 || [ "$i" -ge ' + str(DNS_WAIT_SECONDS) + " ];"
    " do i=$((i+1)); sleep 1; done;"
    " done < " + HOSTFILE + "; fi;"
    ' exec "$@"')


def ranks(mpi: Mpi) -> int:
    return mpi.workers * mpi.processes_per_worker


def mpirun_argv(mpi: Mpi, command: list[str], args: list[str]) -> list[str]:
    """The launcher's command line: every rank, OMP_NUM_THREADS exported to all of them."""
    n = str(ranks(mpi))
    if mpi.implementation == "OpenMPI":
        # One rank per slot (the hostfile gives each worker processesPerWorker slots);
        # with several threads per rank, binding each rank to one core would pile its
        # threads onto that core.
        bind = ["--bind-to", "none"] if mpi.threads_per_process > 1 else []
        head = ["mpirun", "-n", n, *bind, "-x", "OMP_NUM_THREADS"]
    else:
        # MPICH's and Intel's Hydra: -genv sets a variable for every rank.
        head = ["mpirun", "-n", n, "-ppn", str(mpi.processes_per_worker),
                "-genv", "OMP_NUM_THREADS", str(mpi.threads_per_process)]
    return [*head, *mpi.mpirun_args, *command, *args]


def launcher_argv(mpi: Mpi, command: list[str], args: list[str],
                  fuse: bool = False) -> list[str]:
    """mpirun behind the wait for the workers' DNS names ($0 names the wrapper in ps),
    and, with `fuse`, for the node FUSE mounts first (pipelinerun/fusewait.py)."""
    script = fusewait.SH_FUSE_WAIT + DNS_WAIT if fuse else DNS_WAIT
    return ["sh", "-c", script, "nightshift-wait-for-workers",
            *mpirun_argv(mpi, command, args)]


def worker_argv(mpi: Mpi, fuse: bool = False) -> list[str]:
    """sshd, behind the wait for the node FUSE mounts with `fuse`: a worker is Ready (its
    sshd answers) only once the ranks would find them, and the launcher waits for every
    worker Ready."""
    if not fuse:
        return list(mpi.sshd_command)
    return ["sh", "-c", fusewait.SH_FUSE_WAIT + 'exec "$@"', "nightshift-wait-for-mounts",
            *mpi.sshd_command]


def render_mpijob(*, run: RunRef, spec: PipelineRunSpec, stage: Stage, attempt: int,
                  suspend: bool, rerun: int = 0,
                  pool: PoolNodes = NO_POOL) -> dict[str, Any]:
    mpi = stage.mpi
    assert mpi is not None  # noqa: S101  (callers dispatch on stage.mpi)
    step = stage.steps[-1]
    name = job_name(run.name, stage.name, attempt)
    labels = {**run.labels(stage.name, "stage"), names.LABEL_ATTEMPT: str(attempt)}
    pod_labels = attempt_labels(run.name, stage.name, attempt)
    env = merge_env(
        [{"name": names.ENV_RUN, "value": run.name},
         {"name": names.ENV_STAGE, "value": stage.name},
         {"name": names.ENV_NAMESPACE, "value": run.namespace},
         {"name": names.ENV_ATTEMPT, "value": str(attempt)}],
        stage.env, step.env,
        [{"name": "OMP_NUM_THREADS", "value": str(mpi.threads_per_process)}])
    storage = {s.name: s for s in spec.storage}
    volumes, mounts = binding.stage_mounts(stage, storage)
    if fuse := binding.fuse_mounts(stage, storage):
        env.append({"name": names.ENV_FUSE_MOUNTS, "value": ":".join(fuse)})
    image = step.image or stage.image

    def container(cname: str, argv: list[str], resources: Mapping[str, Any]) -> dict[str, Any]:
        c: dict[str, Any] = {
            "name": cname, "image": image, "command": argv, "env": copy.deepcopy(env),
            "securityContext": runner.container_security(), **runner.TERMINATION_MESSAGE,
        }
        if resources:
            c["resources"] = copy.deepcopy(dict(resources))
        if mounts:
            c["volumeMounts"] = copy.deepcopy(mounts)
        if stage.image_pull_policy:
            c["imagePullPolicy"] = stage.image_pull_policy
        return c

    worker = container(WORKER_CONTAINER, worker_argv(mpi, bool(fuse)), stage.resources)
    # Ready only once sshd accepts connections, so the launcher (created when every
    # worker is Ready) never races the workers' start.
    worker["readinessProbe"] = {"tcpSocket": {"port": mpi.ssh_port},
                                "periodSeconds": 2, "failureThreshold": 60}
    launcher = container(step.name, launcher_argv(mpi, step.command, step.args, bool(fuse)),
                         mpi.launcher_resources or LAUNCHER_RESOURCES)
    metadata: dict[str, Any] = {"name": name, "namespace": run.namespace, "labels": labels,
                                "ownerReferences": [run.owner_reference()]}
    if attempt:
        metadata["annotations"] = {names.ANNOTATION_RERUN: str(rerun)}
    run_policy: dict[str, Any] = {
        # The launcher Job's retries: a failed rank ends mpirun, and the whole job reruns.
        "backoffLimit": stage.retries.per_item,
        # Running workers are deleted when the launcher ends, so their nodes free up.
        "cleanPodPolicy": "Running",
        "suspend": suspend,
    }
    if stage.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = stage.active_deadline_seconds
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "slotsPerWorker": mpi.processes_per_worker,
            "runPolicy": run_policy,
            "sshAuthMountPath": mpi.ssh_auth_mount_path,
            "mpiImplementation": mpi.implementation,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": _template(spec, stage, run, pod_labels, launcher,
                                                   volumes, pool)},
                "Worker": {"replicas": mpi.workers, "restartPolicy": "Never",
                           "template": _template(spec, stage, run, pod_labels, worker,
                                                 volumes, pool)},
            },
        },
    }


def _template(spec: PipelineRunSpec, stage: Stage, run: RunRef, labels: Mapping[str, str],
              container: dict[str, Any], volumes: list[dict[str, Any]],
              pool: PoolNodes) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "containers": [container],
        "enableServiceLinks": False,
        "securityContext": pod_security(stage),
    }
    if volumes:
        pod["volumes"] = copy.deepcopy(volumes)
        binding.one_volume_per_claim(pod)
    pod.update(placement(spec, stage, run.namespace, pool))
    return {"metadata": pod_metadata(stage, labels), "spec": pod}


def _true(conds: list[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conds if c.get("type") == type_ and c.get("status") == "True"),
                None)


def as_job(mpijob: Mapping[str, Any]) -> dict[str, Any]:
    """The MPIJob as the Job fields progress.py reads: one completion, index 0; and
    LAUNCHER_RUNNING and OPERATOR_SEEN, which stalled.py reads."""
    meta = mpijob.get("metadata") or {}
    status = mpijob.get("status") or {}
    conds = list(status.get("conditions") or [])
    suspended = bool(((mpijob.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
    workers = (status.get("replicaStatuses") or {}).get("Worker") or {}
    job_status: dict[str, Any] = {"active": int(workers.get("active") or 0),
                                  "ready": int(workers.get("active") or 0),
                                  OPERATOR_SEEN: bool(status)}
    launcher = (status.get("replicaStatuses") or {}).get("Launcher")
    if launcher is not None:  # the MPI Operator writes it once the launcher Job exists
        job_status[LAUNCHER_RUNNING] = int(launcher.get("active") or 0)
    done, failed = _true(conds, "Succeeded"), _true(conds, "Failed")
    if done:
        job_status.update(succeeded=1, completedIndexes="0",
                          completionTime=status.get("completionTime"),
                          conditions=[{"type": "Complete", "status": "True",
                                       "lastTransitionTime": done.get("lastTransitionTime")}])
    elif failed:
        job_status.update(failed=1, failedIndexes="0", conditions=[{
            "type": "Failed", "status": "True",
            # "MPIJobFailed", "MPIJobEvicted", ... with the MPI Operator's own message.
            "reason": failed.get("reason") or "MPIJobFailed",
            "message": failed.get("message") or "",
            "lastTransitionTime": failed.get("lastTransitionTime")}])
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "uid",
                                          "creationTimestamp", "ownerReferences")
                     if k in meta},
        "spec": {"completions": 1, "parallelism": 1, "suspend": suspended},
        "status": job_status,
    }


def suspend_patch(name: str, namespace: str, suspend: bool) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runPolicy": {"suspend": suspend}}}
