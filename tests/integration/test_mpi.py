"""MPI stages: a PipelineRun's mpi stage through the operator and the Kubeflow MPI Operator
(KWOK nodes: the run's loop, gang start, status), and real MPI ranks in pods on the real
node (the rendered MPIJob, our image's OpenMPI and sshd, the NPB EP kernel verified).

The MPI Operator runs in the local cluster like Karpenter (hack/build-upstream.sh builds
it); on another cluster the tests skip unless its MPIJob CRD is installed.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest

from nightshift.kube import Kube
from nightshift.pipelinerun import mpijob, stalled
from nightshift.pipelinerun.items import RunRef
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift_localcluster import helminstall
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import (
    KWOK_FAST,
    get_run,
    pipelinerun,
    stage,
    wait_phase,
    wait_progressing,
)
from tests.integration.test_real_node import on_real_node, real_node

__all__ = ["real_node"]  # the fixture, used by name below

MPI_IMAGE = "nightshift-mpi:dev"


@pytest.fixture(scope="module")
def mpi_operator(kubectl: Kubectl) -> None:
    r = kubectl("get", "crd", "mpijobs.kubeflow.org", check=False)
    if r.returncode != 0:
        pytest.skip("no MPIJob CRD: the MPI Operator is not installed in this cluster")


def test_mpi_stage_gang_starts_and_its_dependent_follows(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str, pool: str,
        mpi_operator: None) -> None:
    mpi = {"name": "ep", "pool": pool, "image": MPI_IMAGE,
           "resources": {"requests": {"cpu": "1"}}, "podAnnotations": dict(KWOK_FAST),
           "mpi": {"workers": 3, "processesPerWorker": 2, "threadsPerProcess": 2},
           "steps": [{"name": "ep", "command": ["ep"], "args": ["S"]}]}
    kubectl.apply(pipelinerun("npb", namespace, [
        mpi, stage("report", pool, n=1, dependsOn=["ep"])]))

    def launcher_created() -> dict[str, Any] | None:
        jobs = kube.list("batch/v1", "Job", namespace)
        return next((j for j in jobs if j["metadata"]["name"].endswith("-launcher")), None)

    launcher = wait_for("the MPIJob's launcher Job", launcher_created, 90, interval=1)
    # Gang start: the launcher exists only once every worker was Ready.
    workers = kube.list("v1", "Pod", namespace,
                        label_selector="training.kubeflow.org/job-role=worker")
    assert len(workers) == 3, [w["metadata"]["name"] for w in workers]
    created = max(w["metadata"]["creationTimestamp"] for w in workers)
    assert launcher["metadata"]["creationTimestamp"] >= created
    pod = launcher["spec"]["template"]["spec"]["containers"][0]
    assert pod["command"] == ["sh", "-c", mpijob.DNS_WAIT, "nightshift-wait-for-workers",
                              "mpirun", "-n", "6", "--bind-to", "none", "-x",
                              "OMP_NUM_THREADS", "ep", "S"]

    run = wait_phase(kube, namespace, "npb", {"Succeeded", "Failed"}, 120)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    stages = {s["name"]: s for s in run["status"]["stages"]}
    assert stages["ep"]["phase"] == "Succeeded" and stages["ep"]["succeeded"] == 1
    assert stages["report"]["phase"] == "Succeeded"


def test_mpi_stage_past_its_deadline_fails_the_run_with_the_reason(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str, mpi_operator: None) -> None:
    """activeDeadlineSeconds becomes the MPIJob's runPolicy deadline; the MPI Operator's
    failure reaches the stage's record and fails the run."""
    slow = {"name": "ep", "pool": pool, "image": MPI_IMAGE,
            "podAnnotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"},
            "mpi": {"workers": 1}, "steps": [{"name": "ep", "command": ["ep"]}],
            "activeDeadlineSeconds": 3}
    kubectl.apply(pipelinerun("npb-late", namespace, [slow]))
    run = wait_phase(kube, namespace, "npb-late", {"Succeeded", "Failed"}, 120)
    assert run["status"]["phase"] == "Failed", run["status"]
    ep = get_run(kube, namespace, "npb-late")["status"]["stages"][0]
    assert ep["phase"] == "Failed", ep
    assert "DeadlineExceeded" in json.dumps(ep), ep
    failed = next(c for c in run["status"]["conditions"] if c["type"] == "Failed")
    assert "it ran longer than its activeDeadlineSeconds" in failed["message"], failed


def _refused(kube: Kube, kubectl: Kubectl, namespace: str, name: str,
             limit: dict[str, Any], ep: dict[str, Any]) -> str:
    """Under a LimitRange with `limit`, run `ep`: the stage's waiting message once the
    run says PodsNotCreated (the same text, Progressing False). The run is cancelled."""
    kubectl.apply({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name},
                   "spec": {"limits": [{"type": "Container", **limit}]}}, namespace)
    kubectl.apply(pipelinerun(name, namespace, [ep]))
    prog = wait_progressing(kube, namespace, name, "PodsNotCreated", timeout=150)
    assert prog["status"] == "False", prog
    waiting = str(get_run(kube, namespace, name)["status"]["stages"][0]["waiting"])
    assert waiting == prog["message"]
    kubectl("-n", namespace, "patch", "pipelinerun", name, "--type=merge", "-p",
            '{"spec": {"cancel": true}}')
    wait_phase(kube, namespace, name, {"Cancelled"}, 60)
    return waiting


def test_mpi_workers_the_api_server_refuses_are_named_on_the_stage_and_run(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str, mpi_operator: None) -> None:
    """The MPI Operator's refusal of its workers (here a LimitRange's) is only in the
    MPIJob's events: the stage and the run say it, with the field to check."""
    waiting = _refused(kube, kubectl, namespace, "npb-big", {"max": {"cpu": "500m"}}, {
        "name": "ep", "pool": pool, "image": MPI_IMAGE, "mpi": {"workers": 2},
        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
        "steps": [{"name": "ep", "command": ["ep"]}]})
    assert waiting.startswith("stage ep: the MPI Operator cannot create its pods: maximum "
                              "cpu usage per Container is 500m, but limit is 1"), waiting
    assert waiting.endswith("check spec.stages[0].resources against the namespace's "
                            "LimitRange"), waiting


def test_an_mpi_launcher_the_api_server_refuses_is_named_with_its_field(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str, mpi_operator: None) -> None:
    """Every worker runs, and the launcher's pod (made by the launcher Job's controller,
    not the MPI Operator) is refused: only the launcher Job's events say so."""
    waiting = _refused(kube, kubectl, namespace, "npb-floor", {"min": {"cpu": "200m"}}, {
        "name": "ep", "pool": pool, "image": MPI_IMAGE, "mpi": {"workers": 2},
        "resources": {"requests": {"cpu": "1"}},
        "podAnnotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"},
        "steps": [{"name": "ep", "command": ["ep"]}]})
    assert waiting.startswith("stage ep: the Job controller cannot create its MPI launcher's "
                              "pod: minimum cpu usage per Container is 200m, but request is "
                              "100m"), waiting
    assert waiting.endswith("check spec.stages[0].mpi.launcherResources against the "
                            "namespace's LimitRange"), waiting


def _rendered(namespace: str, workers: int, args: list[str],
              **mpi: Any) -> dict[str, Any]:
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "ep", "image": MPI_IMAGE, "imagePullPolicy": "Never",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "mpi": {"workers": workers, "processesPerWorker": 1, "threadsPerProcess": 2, **mpi},
        "steps": [{"name": "ep", "command": ["ep"], "args": args}]}]})
    run = RunRef(f"npb-{uuid.uuid4().hex[:6]}", namespace, str(uuid.uuid4()))
    job = mpijob.render_mpijob(run=run, spec=spec, stage=spec.stages[0], attempt=0,
                               suspend=False)
    # No PipelineRun owns it here (the garbage collector would delete an orphan).
    job["metadata"].pop("ownerReferences")
    for role in job["spec"]["mpiReplicaSpecs"].values():
        on_real_node(role["template"]["spec"])
    return job


def _need_image(node: dict[str, Any]) -> None:
    if problem := helminstall.missing_image(node, MPI_IMAGE):
        pytest.skip(problem)


def test_real_mpi_ranks_across_worker_pods_verify_npb_ep(
        real_node: dict[str, Any], kube: Kube, kubectl: Kubectl, namespace: str,
        mpi_operator: None) -> None:
    _need_image(real_node)
    job = _rendered(namespace, workers=2, args=["S"])
    kubectl.apply(job)
    name = job["metadata"]["name"]

    def finished() -> str | None:
        got = kube.get(mpijob.API_VERSION, mpijob.KIND, name, namespace) or {}
        for c in (got.get("status") or {}).get("conditions") or []:
            if c["type"] in ("Succeeded", "Failed") and c["status"] == "True":
                return str(c["type"])
        return None

    result = wait_for(f"MPIJob {name}", finished, 240, interval=2)
    # The launcher pod that succeeded (`logs job/...` may pick a failed earlier attempt).
    launchers = kube.list("v1", "Pod", namespace, label_selector=f"job-name={name}-launcher")
    done = [p["metadata"]["name"] for p in launchers if p["status"].get("phase") == "Succeeded"]
    logs = kubectl("logs", done[0] if done else f"job/{name}-launcher", "-n", namespace,
                   check=False)
    pods = kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
    assert result == "Succeeded", f"{result}\n{pods}\n{logs.stdout}{logs.stderr}"
    # The first launcher succeeds: it waited for the workers' names, not raced them.
    assert len(launchers) == 1, f"{pods}\n{logs.stdout}"
    out = logs.stdout
    print(out)  # the figures, for `pytest -s`
    # Two ranks, each in its own worker pod (its hostname), two OpenMP threads each.
    hosts = re.findall(r"ep: rank (\d) of 2 on (\S+), 2 threads", out)
    assert sorted(h[0] for h in hosts) == ["0", "1"], out
    assert {h[1] for h in hosts} == {f"{name}-worker-0", f"{name}-worker-1"}, out
    # The published NPB class S verification sums, to 1e-8.
    assert "gaussian pairs=13176389" in out and "verification SUCCESSFUL" in out, out


def test_real_mpi_rank_failure_reruns_the_whole_job(
        real_node: dict[str, Any], kube: Kube, kubectl: Kubectl, namespace: str,
        mpi_operator: None) -> None:
    """An unknown class makes every rank abort: mpirun fails, the launcher is retried
    (runPolicy.backoffLimit = retries.perItem) as a whole, then the MPIJob fails."""
    _need_image(real_node)
    job = _rendered(namespace, workers=2, args=["Z"])
    job["spec"]["runPolicy"]["backoffLimit"] = 1
    kubectl.apply(job)
    name = job["metadata"]["name"]

    def failed() -> dict[str, Any] | None:
        got = kube.get(mpijob.API_VERSION, mpijob.KIND, name, namespace) or {}
        conds = (got.get("status") or {}).get("conditions") or []
        return got if any(c["type"] == "Failed" and c["status"] == "True"
                          for c in conds) else None

    got = wait_for(f"MPIJob {name} to fail", failed, 240, interval=2)
    launcher = json.loads(kubectl("get", "job", f"{name}-launcher", "-n", namespace,
                                  "-o", "json").stdout)
    # Two launcher pods: the first run and its one whole-job retry.
    assert launcher["status"].get("failed") == 2, launcher["status"]
    view = mpijob.as_job(got)
    assert view["status"]["failedIndexes"] == "0"


def test_real_worker_whose_sshd_never_answers_holds_the_launcher_and_is_named(
        real_node: dict[str, Any], kube: Kube, kubectl: Kubectl, namespace: str,
        mpi_operator: None) -> None:
    """A worker command that is no sshd: the kubelet's readiness probe never passes, so the
    MPI Operator never makes the launcher, with every worker Running. The stage's reading
    of the real pods names the worker and the fields."""
    _need_image(real_node)
    job = _rendered(namespace, workers=2, args=["S"], sshdCommand=["sleep", "600"])
    kubectl.apply(job)
    name = job["metadata"]["name"]
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "ep", "image": MPI_IMAGE, "mpi": {"workers": 2, "sshdCommand": ["sleep", "600"]},
        "steps": [{"name": "ep", "command": ["ep"]}]}]})

    def running() -> list[dict[str, Any]] | None:
        pods = kube.list("v1", "Pod", namespace,
                         label_selector=f"training.kubeflow.org/job-name={name}",
                         field_selector="status.phase=Running")
        return pods if len(pods) == 2 else None

    wait_for(f"MPIJob {name}'s two workers Running", running, 120, interval=1)
    # Ten readiness probes (periodSeconds 2) later, still neither Ready nor a launcher.
    time.sleep(20)
    pods = running() or []
    assert kube.get("batch/v1", "Job", name + mpijob.LAUNCHER_SUFFIX, namespace) is None
    found = stalled.workers_unready(spec.stages[0], 0, pods)
    assert found is not None, [p["status"].get("conditions") for p in pods]
    reason, message = found
    assert reason == stalled.NOT_STARTING
    assert re.fullmatch(
        rf"stage ep: MPI worker {name}-worker-[01] runs but is not ready: nothing answers on "
        r"port 2222, so the MPI Operator does not create the launcher; check "
        r"spec\.stages\[0\]\.mpi\.sshdCommand and sshPort against the image \(docs/mpi\.md\)",
        message), message
    view = mpijob.as_job(kube.get(mpijob.API_VERSION, mpijob.KIND, name, namespace) or {})
    assert stalled.to_read(view, 2) == "gang", view
