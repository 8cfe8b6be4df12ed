"""An MPI stage whose workers all run and whose launcher does not is never a silent
"Running": its launcher is not made while a worker's sshd does not answer, or is made and
its pod is Pending or refused. Each says why on the stage and the run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.pipelinerun import mpijob, stalled
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import make_run
from tests.unit.test_uncreated import NOW, condition_of, event

EP = PipelineRunSpec.model_validate({"stages": [{
    "name": "ep", "image": "mpi:dev", "mpi": {"workers": 2, "sshPort": 2022},
    "steps": [{"name": "ep", "command": ["ep"]}]}]}).stages[0]
LAUNCHER_QUOTA = ('Error creating: pods "npb-ep-launcher-x7" is forbidden: exceeded quota: '
                  "physics, requested: cpu=100m, used: cpu=4, limited: cpu=4")
LAUNCHER_LIMIT = ('Error creating: pods "npb-ep-launcher-x7" is forbidden: minimum cpu usage '
                  "per Container is 200m, but request is 100m")


def mpi_status(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "npb-ep"}, "spec": {}, "status": status}


def test_as_job_says_whether_the_launcher_is_made_and_running() -> None:
    workers = {"Worker": {"active": 2}}
    assert mpijob.LAUNCHER_RUNNING not in mpijob.as_job(
        mpi_status(replicaStatuses=workers))["status"]
    # The MPI Operator writes the launcher's entry once its Job exists, without a 0.
    made = mpijob.as_job(mpi_status(replicaStatuses={**workers, "Launcher": {}}))
    assert made["status"][mpijob.LAUNCHER_RUNNING] == 0
    running = mpijob.as_job(mpi_status(replicaStatuses={**workers, "Launcher": {"active": 1}}))
    assert running["status"][mpijob.LAUNCHER_RUNNING] == 1


@pytest.mark.parametrize(("job", "held"), [
    ({"status": {"active": 2}}, "gang"),
    ({"status": {"active": 3}}, "gang"),
    ({"status": {"active": 2, mpijob.LAUNCHER_RUNNING: 0}}, "launcher"),
    ({"status": {"active": 2, mpijob.LAUNCHER_RUNNING: 1}}, ""),
    ({"status": {"active": 1}}, ""),  # short of workers: workers_short says it
    ({"spec": {"suspend": True}, "status": {"active": 2}}, ""),
    ({"status": {"active": 2, "conditions": [{"type": "Complete", "status": "True"}]}}, ""),
])
def test_which_mpi_stages_are_held_by_their_launcher(job: dict[str, Any], held: str) -> None:
    assert stalled.launcher_short(job, 2) == held


def test_the_launchers_refused_pod_is_said_with_the_launchers_field() -> None:
    found = stalled.not_created(EP, 0, "npb-ep-launcher", [event(LAUNCHER_QUOTA)], NOW,
                                whose="launcher")
    assert found == (stalled.WAITING_FOR_QUOTA,
                     "stage ep: the Job controller cannot create its MPI launcher's pod: "
                     "exceeded quota: physics, requested: cpu=100m, limited: cpu=4; it is "
                     "created as the namespace's ResourceQuota frees up, but the stage's "
                     "running workers hold their share until it runs; else raise the quota "
                     "or lower spec.stages[0].mpi.launcherResources or resources")
    found = stalled.not_created(EP, 0, "npb-ep-launcher", [event(LAUNCHER_LIMIT)], NOW,
                                whose="launcher")
    assert found is not None and found[0] == stalled.NOT_CREATED
    assert found[1].endswith("; check spec.stages[0].mpi.launcherResources against the "
                             "namespace's LimitRange"), found
    other = stalled.not_created(EP, 0, "npb-ep-launcher", [event(
        LAUNCHER_LIMIT.replace("minimum cpu usage per Container is 200m, but request is 100m",
                               "admission webhook denied it"))], NOW, whose="launcher")
    assert other is not None and other[1].endswith("; kubectl describe job npb-ep-launcher")


def test_a_same_named_launcher_jobs_old_refusals_are_not_this_ones() -> None:
    made = NOW - timedelta(seconds=60)
    old = event(LAUNCHER_LIMIT, ago=120)
    assert stalled.not_created(EP, 0, "l", [old], NOW, whose="launcher", after=made) is None
    assert stalled.not_created(EP, 0, "l", [old, event(LAUNCHER_QUOTA, ago=30)], NOW,
                               whose="launcher", after=made) is not None


def test_the_mpi_operators_refused_launcher_job_is_named_as_a_job() -> None:
    said = ('launcher pod created failed: jobs.batch "npb-ep-launcher" is forbidden: exceeded '
            "quota: physics, requested: count/jobs.batch=1, used: count/jobs.batch=5, "
            "limited: count/jobs.batch=5")
    found = stalled.not_created(EP, 0, "npb-ep", [event(said, reason="MPIJobFailed")], NOW,
                                whose="mpi")
    assert found is not None and found[1].startswith(
        "stage ep: the MPI Operator cannot create its launcher Job: exceeded quota: physics, "
        "requested: count/jobs.batch=1, limited: count/jobs.batch=5;"), found


def worker(name: str, phase: str = "Running", ready: bool = False,
           container: str = mpijob.WORKER_CONTAINER) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": container}]},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "ContainersNotReady"}]}}


def test_a_worker_whose_sshd_never_answers_is_named_with_its_fields() -> None:
    pods = [worker("npb-ep-worker-0", ready=True), worker("npb-ep-worker-1")]
    assert stalled.workers_unready(EP, 0, pods) == (
        stalled.NOT_STARTING,
        "stage ep: MPI worker npb-ep-worker-1 runs but is not ready: nothing answers on "
        "port 2022, so the MPI Operator does not create the launcher; check "
        "spec.stages[0].mpi.sshdCommand and sshPort against the image (docs/mpi.md)")
    assert stalled.workers_unready(EP, 0, pods[:1]) is None  # every worker Ready
    assert stalled.workers_unready(EP, 0, [
        worker("npb-ep-worker-1", phase="Pending"),  # Pending pods: stalled.why's
        worker("npb-ep-launcher-x", container="ep")]) is None


def _mpi_run(kube: RecordingKube, state: pipelinerun.LoopState, config: OperatorConfig
             ) -> dict[str, Any]:
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    (mpath,) = [p for p in kube.store if "/mpijobs/" in p]
    return kube.store[mpath]


def _passes(kube: RecordingKube, state: pipelinerun.LoopState, config: OperatorConfig,
            clock: list[float]) -> tuple[set[str], dict[str, Any]]:
    """A pass before the stall is due (nothing read), then one after it."""
    run_path = kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")
    kube.calls.clear()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    assert not {r for _, r, v, _ in kube.calls if v == "list" and r in ("pods", "events")}
    clock[0] += stalled.STALL_SECONDS + 1
    kube.calls.clear()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    read = {r for _, r, v, _ in kube.calls if v == "list" and r in ("pods", "events")}
    return read, condition_of(kube.store[run_path], "Progressing")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.observe.time.monotonic", lambda: now[0])
    return now


RUN = make_run([{"name": "ep", "image": "mpi:dev", "mpi": {"workers": 2},
                 "steps": [{"name": "ep", "command": ["ep"]}]}])


def test_reconcile_names_a_worker_that_holds_back_the_launcher(clock: list[float]) -> None:
    kube, state, config = RecordingKube([RUN]), pipelinerun.LoopState(), OperatorConfig.from_env()
    mpi = _mpi_run(kube, state, config)
    mpi["status"] = {"replicaStatuses": {"Worker": {"active": 2}}}
    labels = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    kube.put(mpi)
    for n, ready in ((0, True), (1, False)):
        pod = {"apiVersion": "v1", "kind": "Pod", **worker(f"npb-ep-worker-{n}", ready=ready)}
        pod["metadata"].update(namespace="physics", labels=labels)
        kube.put(pod)
    read, prog = _passes(kube, state, config, clock)
    assert read == {"events", "pods"}  # the MPIJob's refusals, then its Running workers
    assert (prog["status"], prog["reason"]) == ("False", stalled.NOT_STARTING)
    assert "MPI worker npb-ep-worker-1 runs but is not ready" in prog["message"], prog


def test_reconcile_reads_the_launcher_jobs_own_refusals(clock: list[float]) -> None:
    kube, state, config = RecordingKube([RUN]), pipelinerun.LoopState(), OperatorConfig.from_env()
    mpi = _mpi_run(kube, state, config)
    mpi["metadata"]["creationTimestamp"] = (datetime.now(UTC) - timedelta(minutes=1)
                                            ).strftime("%Y-%m-%dT%H:%M:%SZ")
    mpi["status"] = {"replicaStatuses": {"Worker": {"active": 2}, "Launcher": {}}}
    kube.put(mpi)
    launcher = mpi["metadata"]["name"] + mpijob.LAUNCHER_SUFFIX

    def refused(n: int, ago: int, message: str) -> None:
        kube.put({"apiVersion": "v1", "kind": "Event", "metadata": {
            "name": f"{launcher}.{n}", "namespace": "physics"}, "reason": "FailedCreate",
            "involvedObject": {"kind": "Job", "name": launcher}, "message": message,
            "lastTimestamp": (datetime.now(UTC) - timedelta(seconds=ago)
                              ).strftime("%Y-%m-%dT%H:%M:%SZ")})

    refused(1, 120, LAUNCHER_QUOTA)  # a same-named Job's, from before this MPIJob
    read, prog = _passes(kube, state, config, clock)
    assert read == {"pods", "events"}  # no Pending launcher pod: its Job's events
    assert prog["reason"] == "Running", prog
    refused(2, 30, LAUNCHER_LIMIT)
    clock[0] += 2 * stalled.STALL_SECONDS  # the read backs off while nothing is said
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    prog = condition_of(kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, "physics",
                                             "nightly")], "Progressing")
    assert (prog["status"], prog["reason"]) == ("False", stalled.NOT_CREATED), prog
    assert prog["message"].startswith(
        "stage ep: the Job controller cannot create its MPI launcher's pod: minimum cpu"), prog
    # The launcher's pod runs: nothing waits, nothing is read.
    mpi = kube.store[kube.path(mpijob.API_VERSION, mpijob.KIND, "physics",
                               mpi["metadata"]["name"])]
    mpi["status"]["replicaStatuses"]["Launcher"] = {"active": 1}
    kube.put(mpi)
    clock[0] += stalled.STALL_SECONDS
    kube.calls.clear()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    prog = condition_of(kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, "physics",
                                             "nightly")], "Progressing")
    assert prog["reason"] == "Running" and state.pods.stalls == {}
