"""Pods the Job controller cannot create (a full quota, a LimitRange, Pod Security, a
webhook) are never a silent "Running": a stage Job with no pod for 30 s has its
FailedCreate events read, and the newest recent one says why, on the stage and the run,
with what to check."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.pipelinerun import mpijob, stalled
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun.plan import plan
from tests.bad_pipelineruns import stage
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import (
    advance,
    condition,
    items_for,
    jobs_of,
    make_run,
    observe,
    stage_status,
    with_status,
)
from tests.unit.test_stalled import CALIB

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
QUOTA = ('Error creating: pods "nightly-calib-0-x7" is forbidden: exceeded quota: physics, '
         "requested: pods=1, used: pods=5000, limited: pods=5000")
LIMIT = ('Error creating: pods "nightly-calib-0-x7" is forbidden: maximum cpu usage per '
         "Container is 500m, but limit is 1")
PSA = ('Error creating: pods "nightly-calib-0-x7" is forbidden: violates PodSecurity '
       '"restricted:latest": restricted volume types (volume "cache" uses restricted '
       'volume type "hostPath")')
HOOK = ('Error creating: admission webhook "policy.example.org" denied the request: '
        "pods must carry a cost-centre label")


def event(message: str, ago: float = 5.0, reason: str = "FailedCreate",
          stamp: str = "lastTimestamp") -> dict[str, Any]:
    when = (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"reason": reason, "message": message, stamp: when}


def indexed(**status: Any) -> dict[str, Any]:
    return {"spec": {"completionMode": "Indexed", "parallelism": 4},
            "status": {"startTime": "2026-11-29T11:59:00Z", **status}}


@pytest.mark.parametrize(("job", "uncreated"), [
    (indexed(active=0, ready=0), True),
    (indexed(ready=0), True),  # the Job controller writes no active count of 0
    (indexed(active=2, ready=0), False),  # pods exist: the Pending pods say why
    (indexed(active=0, terminating=1), False),  # a pod being replaced holds its index
    ({"spec": {"completionMode": "Indexed", "parallelism": 4}, "status": {}}, False),
    ({**indexed(), "spec": {"completionMode": "Indexed", "parallelism": 4,
                            "suspend": True}}, False),
    ({**indexed(), "spec": {"completionMode": "Indexed", "parallelism": 0}}, False),
    (indexed(conditions=[{"type": "Complete", "status": "True"}]), False),
    (indexed(conditions=[{"type": "Failed", "status": "True"}]), False),
    ({**indexed(), "spec": {"completions": 1, "parallelism": 1}}, False),  # an MPIJob
])
def test_which_jobs_have_no_pod(job: dict[str, Any], uncreated: bool) -> None:
    assert stalled.uncreated(job) is uncreated


@pytest.mark.parametrize(("message", "reason", "fix"), [
    (QUOTA, stalled.WAITING_FOR_QUOTA, "pods are created as the namespace's ResourceQuota "
     "frees up; else raise it or lower spec.stages[0].parallelism or resources"),
    (LIMIT, stalled.NOT_CREATED,
     "check spec.stages[0].resources against the namespace's LimitRange"),
    (PSA, stalled.NOT_CREATED, "check the namespace's pod-security.kubernetes.io/enforce "
     "level against spec.stages[0] and its storage (docs/security.md)"),
    (HOOK, stalled.NOT_CREATED, "kubectl describe job nightly-calib-0"),
])
def test_the_refusal_names_its_cause_and_the_fix(message: str, reason: str, fix: str) -> None:
    found = stalled.not_created(CALIB, 0, "nightly-calib-0", [event(message)], NOW)
    said = message.removeprefix("Error creating: ").removeprefix(
        'pods "nightly-calib-0-x7" is forbidden: ').replace(", used: pods=5000", "")
    assert found == (reason, f"stage calib: the Job controller cannot create its pods: "
                     f"{said}; {fix}")
    assert len(found[1]) <= stalled.MESSAGE_CHARS


def test_what_changes_between_retries_is_left_out() -> None:
    """The pod's generated name, the quota's use and the recorder's fold change with
    every retry: the same refusal must read the same, or each read would write."""
    a = stalled.not_created(CALIB, 0, "j", [event(QUOTA)], NOW)
    b = stalled.not_created(CALIB, 0, "j", [event(
        "(combined from similar events): " + QUOTA.replace("-x7", "-q2").replace(
            "used: pods=5000", "used: pods=4999,requests.cpu=12"))], NOW)
    assert a == b and a is not None
    assert a[1].startswith("stage calib: the Job controller cannot create its pods: "
                           "exceeded quota: physics, requested: pods=1, limited: pods=5000;")


def test_the_newest_recent_refusal_is_the_one_said() -> None:
    events = [event(QUOTA, ago=300), event(LIMIT, ago=30, stamp="eventTime"),
              event("Created pod: nightly-calib-0-x7", ago=1, reason="SuccessfulCreate")]
    found = stalled.not_created(CALIB, 0, "j", events, NOW)
    assert found is not None and "maximum cpu usage" in found[1]
    # A folded Event's series says when it last happened.
    folded = {**event(QUOTA, ago=900), "series": {
        "count": 40, "lastObservedTime": (NOW - timedelta(seconds=2)).isoformat()}}
    found = stalled.not_created(CALIB, 0, "j", [event(LIMIT, ago=30), folded], NOW)
    assert found is not None and found[0] == stalled.WAITING_FOR_QUOTA
    # Older than the window: it says nothing of the Job's present.
    assert stalled.not_created(CALIB, 0, "j", [event(QUOTA, ago=601)], NOW) is None
    assert stalled.not_created(CALIB, 0, "j", [], NOW) is None


def test_a_webhook_essay_is_cut_in_the_middle_and_the_fix_kept() -> None:
    long = "Error creating: admission webhook said: " + "because " * 80
    found = stalled.not_created(CALIB, 0, "nightly-calib-0", [event(long)], NOW)
    assert found is not None and len(found[1]) == stalled.MESSAGE_CHARS
    assert found[1].endswith("…; kubectl describe job nightly-calib-0")


def _no_pods_run() -> tuple[dict[str, Any], dict[str, Any]]:
    run = make_run([stage("calib", forEach={"items": ["a", "b"]})])
    p = plan(observe(run, items=items_for(run, "calib", count=2)))
    (job,) = jobs_of(p)
    job = with_status(job, ready=0, startTime="2026-11-29T11:59:00Z")
    return advance(run, p), job


@pytest.mark.parametrize(("reason", "progressing"), [
    (stalled.NOT_CREATED, "False"),  # a LimitRange or Pod Security: no progress
    (stalled.WAITING_FOR_QUOTA, "True"),  # other runs end and free the quota
])
def test_the_stage_and_the_run_say_it(reason: str, progressing: str) -> None:
    run, job = _no_pods_run()
    why = (reason, "stage calib: the Job controller cannot create its pods: ...; fix")
    p = plan(replace(observe(run, jobs=[job], items=items_for(run, "calib", count=2)),
                     stalled={"calib": why}))
    assert stage_status(p, "calib")["waiting"] == why[1]
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"], prog["message"]) == (progressing, reason, why[1])
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "StagePodsWaiting")]
    # A Job with no pod sends no events of its own: the run looks again.
    assert p.requeue_after is not None and p.requeue_after <= stalled.STALL_SECONDS


def test_a_refused_stage_stops_the_run_before_one_waiting_for_nodes() -> None:
    run = make_run([stage(n, forEach={"items": ["a", "b"]}) for n in ("calib", "sky")])
    p0 = plan(observe(run, items=items_for(run, "calib", "sky", count=2)))
    jobs = [with_status(j, ready=0, startTime="2026-11-29T11:59:00Z") for j in jobs_of(p0)]
    why = {"calib": (stalled.WAITING_FOR_NODES, "stage calib: ...; nodes"),
           "sky": (stalled.NOT_CREATED, "stage sky: ...; limits")}
    p = plan(replace(observe(advance(run, p0), jobs=jobs,
                             items=items_for(run, "calib", "sky", count=2)), stalled=why))
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("False", stalled.NOT_CREATED)


def test_reconcile_reads_the_jobs_events_only_after_the_stall(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.observe.time.monotonic", lambda: clock[0])
    kube = RecordingKube([make_run([stage("calib", forEach={"items": ["a", "b"]})])])
    state = pipelinerun.LoopState()
    config = OperatorConfig.from_env()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    job = kube.store[jpath]
    job["status"] = {"ready": 0, "startTime": "2026-11-29T11:59:00Z"}
    kube.put(job)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.put({"apiVersion": "v1", "kind": "Event", "metadata": {
        "name": "nightly-calib-0.1", "namespace": "physics"},
        "involvedObject": {"kind": "Job", "name": job["metadata"]["name"],
                           "uid": job["metadata"]["uid"]},
        "reason": "FailedCreate", "message": LIMIT, "lastTimestamp": now})
    run_path = kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")

    def one_pass() -> tuple[bool, dict[str, Any]]:
        kube.calls.clear()
        pipelinerun.reconcile(kube, config, "physics", "nightly", state)
        prog = condition_of(kube.store[run_path], "Progressing")
        return ("", "events", "list", "namespace") in kube.calls, prog

    read, prog = one_pass()
    assert not read and prog["reason"] == "Running"  # not without pods long enough
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = one_pass()
    assert read and (prog["status"], prog["reason"]) == ("False", stalled.NOT_CREATED)
    assert "maximum cpu usage per Container is 500m" in prog["message"]
    # The same state a pass later writes nothing (the refusal is read again, unchanged).
    before = copy.deepcopy(kube.store)
    clock[0] += stalled.STALL_SECONDS
    one_pass()
    assert kube.store == before
    # The LimitRange mended, its pods made: the Job is forgotten, the stage runs.
    job = copy.deepcopy(kube.store[jpath])
    job["status"] = {"active": 2, "ready": 2, "startTime": "2026-11-29T11:59:00Z"}
    kube.put(job)
    read, prog = one_pass()
    assert not read and prog["reason"] == "Running"
    assert state.pods.stalls == {}


def condition_of(run: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in run["status"]["conditions"] if c["type"] == type_)


MPI_QUOTA = ('worker pod created failed: pods "npb-ep-worker-1" is forbidden: exceeded quota: '
             "physics, requested: pods=1, used: pods=9, limited: pods=10")


@pytest.mark.parametrize(("job", "short"), [
    ({"status": {"active": 0}}, True),
    ({"status": {"active": 1}}, True),  # one of two workers running
    ({"status": {"active": 2}}, False),
    ({"spec": {"suspend": True}, "status": {}}, False),
    ({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, False),
])
def test_which_mpi_stages_are_short_of_workers(job: dict[str, Any], short: bool) -> None:
    assert stalled.workers_short(job, 2) is short


def test_the_mpi_operators_refusal_is_said_with_its_field() -> None:
    others = [event("MPIJob physics/npb is created.", reason="MPIJobCreated"),
              event("npb-ep: launcher failed", reason="MPIJobFailed")]  # no create refusal
    assert stalled.not_created(CALIB, 0, "npb-ep", others, NOW, whose="mpi") is None
    found = stalled.not_created(CALIB, 0, "npb-ep", [*others, event(
        MPI_QUOTA, reason="MPIJobFailed")], NOW, whose="mpi")
    assert found == (stalled.WAITING_FOR_QUOTA,
                     "stage calib: the MPI Operator cannot create its pods: exceeded quota: "
                     "physics, requested: pods=1, limited: pods=10; pods are created as the "
                     "namespace's ResourceQuota frees up; else raise it or lower "
                     "spec.stages[0].mpi.workers or resources")
    found = stalled.not_created(CALIB, 0, "npb-ep", [event(
        MPI_QUOTA.replace("exceeded quota", "admission webhook denied"),
        reason="MPIJobFailed")], NOW, whose="mpi")
    assert found is not None and found[1].endswith("; kubectl describe mpijob npb-ep")


def test_reconcile_reads_an_mpi_stages_pods_then_its_mpijobs_events(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.observe.time.monotonic", lambda: clock[0])
    run = make_run([{"name": "ep", "image": "mpi:dev", "mpi": {"workers": 2},
                     "steps": [{"name": "ep", "command": ["ep"]}]}])
    kube = RecordingKube([run])
    state = pipelinerun.LoopState()
    config = OperatorConfig.from_env()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    (mpath,) = [p for p in kube.store if "/mpijobs/" in p]
    mpi = kube.store[mpath]
    mpi["metadata"]["uid"] = "mpi-uid"
    mpi["status"] = {"replicaStatuses": {"Worker": {"active": 1}}}
    kube.put(mpi)
    run_path = kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")

    def one_pass() -> tuple[set[str], dict[str, Any]]:
        kube.calls.clear()
        pipelinerun.reconcile(kube, config, "physics", "nightly", state)
        read = {r for g, r, v, _ in kube.calls if v == "list" and r in ("pods", "events")}
        return read, condition_of(kube.store[run_path], "Progressing")

    assert one_pass()[0] == set()  # one worker running, one not: not for 30 s yet
    # No Pending worker to say why: the MPIJob's own events are read.
    kube.put({"apiVersion": "v1", "kind": "Event", "metadata": {
        "name": "npb.1", "namespace": "physics"}, "reason": "MPIJobFailed",
        "involvedObject": {"kind": "MPIJob", "uid": "mpi-uid"},
        "message": MPI_QUOTA, "lastTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = one_pass()
    assert read == {"pods", "events"}
    assert (prog["status"], prog["reason"]) == ("True", stalled.WAITING_FOR_QUOTA)
    assert "the MPI Operator cannot create its pods: exceeded quota" in prog["message"]
    # A Pending worker says why first: its pods are read, not the events.
    labels = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "npb-ep-worker-1", "namespace": "physics", "labels": labels},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu."}]}})
    clock[0] += stalled.STALL_SECONDS
    read, prog = one_pass()
    assert read == {"pods"} and prog["reason"] == stalled.WAITING_FOR_NODES, prog
    # Both workers and the launcher running: nothing is read, nothing waits.
    mpi = kube.store[mpath]
    mpi["status"] = {"replicaStatuses": {"Worker": {"active": 2}, "Launcher": {"active": 1}}}
    kube.put(mpi)
    read, prog = one_pass()
    assert read == set() and prog["reason"] == "Running" and state.pods.stalls == {}


def partial(**status: Any) -> dict[str, Any]:
    return {"spec": {"completionMode": "Indexed", "parallelism": 4, "completions": 10},
            "status": {"startTime": "2026-11-29T11:59:00Z", "ready": 2, **status}}


@pytest.mark.parametrize(("job", "throttled"), [
    (partial(active=2), True),  # 4 may run, 10 left: 2 running
    (partial(active=4), False),  # as many as parallelism
    (partial(active=2, succeeded=8), False),  # 2 left, 2 running: the Job's end
    (partial(active=2, succeeded=6, failedIndexes="0-1"), False),  # 2 left once failed
    (partial(active=2, ready=0), False),  # none ready: the Pending pods say why
    (partial(active=0), False),  # none at all: uncreated
    (partial(active=2, terminating=1), False),
    ({**partial(active=2), "spec": {"parallelism": 4, "completions": 10}}, False),
])
def test_which_jobs_run_fewer_pods_than_they_may(job: dict[str, Any], throttled: bool) -> None:
    assert stalled.throttled(job) is throttled


def test_with_pods_running_only_a_full_quota_is_said() -> None:
    found = stalled.not_created(CALIB, 0, "j", [event(QUOTA)], NOW, some=True)
    assert found is not None and found[0] == stalled.WAITING_FOR_QUOTA
    assert found[1].startswith("stage calib: the Job controller cannot create more of its "
                               "pods: exceeded quota: physics")
    # A refusal that refuses every pod cannot be why some run: an old one, say nothing.
    assert stalled.not_created(CALIB, 0, "j", [event(LIMIT)], NOW, some=True) is None


def test_reconcile_says_a_stage_runs_short_of_its_pods_for_the_quota(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.observe.time.monotonic", lambda: clock[0])
    kube = RecordingKube([make_run([stage("calib", parallelism=4,
                                          forEach={"items": list("abcdefgh")})])])
    state = pipelinerun.LoopState()
    config = OperatorConfig.from_env()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    job = kube.store[jpath]
    assert job["spec"]["parallelism"] == 4
    job["status"] = {"active": 1, "ready": 1, "startTime": "2026-11-29T11:59:00Z"}
    kube.put(job)
    kube.put({"apiVersion": "v1", "kind": "Event", "metadata": {
        "name": "nightly-calib.1", "namespace": "physics"}, "reason": "FailedCreate",
        "involvedObject": {"kind": "Job", "uid": job["metadata"]["uid"]}, "message": QUOTA,
        "lastTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
    run_path = kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    clock[0] += stalled.STALL_SECONDS + 1
    kube.calls.clear()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    assert ("", "events", "list", "namespace") in kube.calls
    assert ("", "pods", "list", "namespace") not in kube.calls  # its pods run: no use
    prog = condition_of(kube.store[run_path], "Progressing")
    assert (prog["status"], prog["reason"]) == ("True", stalled.WAITING_FOR_QUOTA)
    assert "cannot create more of its pods: exceeded quota" in prog["message"]


@pytest.mark.parametrize(("job", "workers", "what"), [
    (indexed(active=2, ready=0), None, "pods"),
    (indexed(ready=0), None, "events"),
    (partial(active=2), None, "more"),
    (partial(active=4), None, "more"),  # 2 of 4 ready: some not (yet) started
    (partial(active=4, ready=4), None, ""),
    ({"status": {"active": 1}}, 2, "mpi"),
    ({"status": {"active": 2}}, 2, "gang"),  # every worker running, no launcher made
    ({"status": {"active": 2, mpijob.LAUNCHER_RUNNING: 0}}, 2, "launcher"),
    ({"status": {"active": 2, mpijob.LAUNCHER_RUNNING: 1}}, 2, ""),
])
def test_what_a_stalled_job_has_read(job: dict[str, Any], workers: int | None,
                                     what: str) -> None:
    assert stalled.to_read(job, workers) == what
