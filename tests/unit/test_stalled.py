"""Stage pods that do not start are never a silent "Running": a few Pending pods of a Job
with active pods and none ready for 30 s say why, on the stage and the run, naming the
field to check; pods merely starting say nothing."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun import stalled
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.spec import PipelineRunSpec
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

SPEC = PipelineRunSpec.model_validate({"stages": [
    stage("calib", image="pyton:3.12", forEach={"items": ["a", "b"]},
          steps=[{"name": "main", "command": ["calib"]},
                 {"name": "plot", "image": "plotter:1", "command": ["plot"]}])]})
CALIB = SPEC.stages[0]


def pod(containers: list[dict[str, Any]] | None = None, init: list[dict[str, Any]] | None = None,
        conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "nightly-calib-0-x7"},
            "status": {"phase": "Pending", "containerStatuses": containers or [],
                       "initContainerStatuses": init or [], "conditions": conditions or []}}


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


@pytest.mark.parametrize(("p", "field"), [
    (pod([waiting("main", "ImagePullBackOff", 'Back-off pulling image "pyton:3.12"')]),
     "check spec.stages[0].image"),
    (pod([waiting("plot", "ErrImagePull")]), "check spec.stages[0].steps[1].image"),
    (pod(init=[waiting("nightshift-stage-in", "ErrImageNeverPull")]), "check spec.runnerImage"),
    (pod([waiting("main", "CreateContainerConfigError", 'secret "keys" not found')]),
     "kubectl describe pod nightly-calib-0-x7"),
])
def test_a_pod_that_cannot_start_names_the_container_reason_and_field(
        p: dict[str, Any], field: str) -> None:
    found = stalled.why(p, CALIB, 0)
    assert found is not None
    reason, message = found
    assert reason == stalled.NOT_STARTING
    assert message.startswith("pod nightly-calib-0-x7 container ")
    assert field in message


def test_the_image_message_is_kept() -> None:
    found = stalled.why(pod([waiting("main", "ImagePullBackOff",
                                     'Back-off pulling image "pyton:3.12"')]), CALIB, 0)
    assert found == (stalled.NOT_STARTING, 'pod nightly-calib-0-x7 container main: '
                     'ImagePullBackOff: Back-off pulling image "pyton:3.12"; check '
                     'spec.stages[0].image')


def test_an_unschedulable_pod_waits_for_nodes() -> None:
    found = stalled.why(pod(conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu."}]), CALIB, 0)
    assert found is not None
    assert found[0] == stalled.WAITING_FOR_NODES
    assert "0/3 nodes are available: 3 Insufficient cpu." in found[1]
    assert "spec.stages[0].resources" in found[1]


def test_a_long_scheduler_message_is_cut_in_the_middle_never_the_fix() -> None:
    # A cluster with many kinds of node: one clause per kind, far past the status cap.
    clauses = ", ".join(f"1 node(s) had untolerated taint {{nightshift.io/pool: p-{i:03d}}}"
                        for i in range(40))
    message = f"0/41 nodes are available: 1 Insufficient cpu, {clauses}."
    p = pod(conditions=[{"type": "PodScheduled", "status": "False",
                         "reason": "Unschedulable", "message": message}])
    found = stalled.summary(CALIB, 0, [p])
    assert found is not None
    text = found[1]
    assert len(text) <= stalled.MESSAGE_CHARS
    assert text.startswith("stage calib: its pods do not start: pod nightly-calib-0-x7 is "
                           "not scheduled: 0/41 nodes are available: 1 Insufficient cpu, ")
    assert text.endswith("…; nodes may still be launching, else check "
                         "spec.stages[0].resources and its pool's nodes")
    # The stage's record holds the same words the run's condition gives.
    rec = {"name": "calib", "phase": pg.RUNNING}
    assert stalled.mark([rec], {"calib": found}) == [found]
    assert rec["waiting"] == text


def test_a_pod_merely_starting_says_nothing() -> None:
    assert stalled.why(pod([waiting("main", "ContainerCreating")]), CALIB, 0) is None
    assert stalled.why(pod(conditions=[{"type": "PodScheduled", "status": "True"}]),
                       CALIB, 0) is None
    assert stalled.summary(CALIB, 0, [pod([waiting("main", "ContainerCreating")])]) is None


@pytest.mark.parametrize(("job", "unready"), [
    ({"status": {"active": 3, "ready": 0}}, True),
    ({"status": {"active": 3}}, False),  # no ready count: nothing is known
    ({"status": {"active": 3, "ready": 1}}, False),
    ({"status": {"active": 0, "ready": 0}}, False),
    ({"spec": {"suspend": True}, "status": {"active": 3, "ready": 0}}, False),
    ({"status": {"active": 1, "ready": 0,
                 "conditions": [{"type": "Failed", "status": "True"}]}}, False),
])
def test_which_jobs_are_unready(job: dict[str, Any], unready: bool) -> None:
    assert stalled.unready(job) is unready


def _running(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run after its first pass, and its stage Job with 2 pods active, none ready."""
    p = plan(observe(run, items=items_for(run, "calib", count=2)))
    (job,) = jobs_of(p)
    return advance(run, p), with_status(job, active=2, ready=0)


def test_the_stage_and_the_run_say_why_and_it_clears_once_pods_start() -> None:
    run, job = _running(make_run([stage("calib", forEach={"items": ["a", "b"]})]))
    why = (stalled.NOT_STARTING, "stage calib: its pods do not start: pod p container main: "
           "ImagePullBackOff; check spec.stages[0].image")
    p = plan(replace(observe(run, jobs=[job], items=items_for(run, "calib", count=2)),
                     stalled={"calib": why}))
    assert stage_status(p, "calib")["waiting"] == why[1]
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"], prog["message"]) == ("False", "PodsNotStarting",
                                                                 why[1])
    assert p.status["phase"] == "Running"
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "StagePodsWaiting")]
    assert p.requeue_after is not None and p.requeue_after <= stalled.STALL_SECONDS
    # The next pass, pods Ready: nothing waits, no second event.
    again = plan(observe(advance(run, p), jobs=[with_status(job, active=2, ready=2)],
                         items=items_for(run, "calib", count=2)))
    assert "waiting" not in stage_status(again, "calib")
    assert condition(again, "Progressing")["reason"] == "Running"
    assert not [e for e in again.events if e.reason == "StagePodsWaiting"]


def test_the_run_keeps_whole_stage_messages_and_counts_the_rest() -> None:
    """Three stages whose pods do not start, each message near the stage's 400-character
    cap: the run's condition (1,024) holds the first two whole, fix included, and points
    to status.stages[].waiting for the third, instead of cutting its fix in half."""
    names_ = ("calib", "ifu", "sky")
    run = make_run([stage(n, forEach={"items": ["a", "b"]}) for n in names_])
    p0 = plan(observe(run, items=items_for(run, *names_, count=2)))
    jobs = [with_status(j, active=2, ready=0) for j in jobs_of(p0)]
    assert len(jobs) == 3
    why = {n: (stalled.WAITING_FOR_NODES, f"stage {n}: its pods do not start: "
               + "x" * 300 + f"; check spec.stages[{i}].resources and its pool's nodes")
           for i, n in enumerate(names_)}
    p = plan(replace(observe(advance(run, p0), jobs=jobs,
                             items=items_for(run, *names_, count=2)), stalled=why))
    message = condition(p, "Progressing")["message"]
    assert len(message) <= 1024
    assert message == (f"{why['calib'][1]}; {why['ifu'][1]}; and 1 more stage waiting: "
                       "see status.stages[].waiting")
    assert stage_status(p, "sky")["waiting"] == why["sky"][1]


def test_the_run_message_shows_what_fits_and_counts_the_rest() -> None:
    said = [(stalled.NOT_STARTING, "m" * 50)] * 3
    assert stalled.run_message(said, 1024) == "; ".join(["m" * 50] * 3)
    assert stalled.run_message(said, 110) == (
        "m" * 50 + "; and 2 more stages waiting: see status.stages[].waiting")
    assert stalled.run_message(said, 60) == "3 stages waiting: see status.stages[].waiting"


def test_waiting_for_nodes_is_still_progressing() -> None:
    run, job = _running(make_run([stage("calib", forEach={"items": ["a", "b"]})]))
    why = (stalled.WAITING_FOR_NODES, "stage calib: its pods do not start: ...")
    p = plan(replace(observe(run, jobs=[job], items=items_for(run, "calib", count=2)),
                     stalled={"calib": why}))
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("True", "WaitingForNodes")


def _reconcile_setup(monkeypatch: pytest.MonkeyPatch, pending: list[dict[str, Any]]
                     ) -> tuple[RecordingKube, pipelinerun.LoopState, list[float], str]:
    """A run whose stage Job exists with 2 pods active and none ready, and its pods."""
    clock = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.observe.time.monotonic", lambda: clock[0])
    kube = RecordingKube([make_run([stage("calib", image="pyton:3.12",
                                          forEach={"items": ["a", "b"]})])])
    state = pipelinerun.LoopState()
    pipelinerun.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly", state)
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    job = kube.store[jpath]
    job["status"] = {"active": 2, "ready": 0}
    kube.put(job)
    for i, status in enumerate(pending):
        kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"nightly-calib-{i}-x7", "namespace": "physics",
            "labels": job["spec"]["template"]["metadata"]["labels"]},
            "status": status})
    return kube, state, clock, jpath


def _pass(kube: RecordingKube, state: pipelinerun.LoopState) -> tuple[bool, dict[str, Any]]:
    """One pass: whether it read pods, and the run's Progressing condition."""
    kube.calls.clear()
    pipelinerun.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly", state)
    run = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")]
    prog = next(c for c in run["status"]["conditions"] if c["type"] == "Progressing")
    return ("", "pods", "list", "namespace") in kube.calls, prog


def test_reconcile_reads_pending_pods_only_after_the_stall(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    stuck = pod([waiting("main", "ErrImagePull", 'pull "pyton:3.12": not found')])["status"]
    kube, state, clock, jpath = _reconcile_setup(monkeypatch, [stuck])
    read, _ = _pass(kube, state)
    assert not read  # not stalled long enough
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = _pass(kube, state)
    assert read and prog["reason"] == "PodsNotStarting"
    assert prog["message"] == ("stage calib: its pods do not start: pod nightly-calib-0-x7 "
                               'container main: ErrImagePull: pull "pyton:3.12": not found; '
                               "check spec.stages[0].image")
    # The same state, a pass later: the same status, so nothing is written again (the
    # operator's own write wakes the run; a changing text would loop).
    before = copy.deepcopy(kube.store)
    read, _ = _pass(kube, state)
    assert not read and kube.store == before
    # Its pods start: the Job is forgotten, nothing is read.
    job = copy.deepcopy(kube.store[jpath])
    job["status"] = {"active": 2, "ready": 2}
    kube.put(job)
    read, prog = _pass(kube, state)
    assert not read and prog["reason"] == "Running"
    assert state.pods.stalls == {}


def test_pods_busy_in_earlier_steps_are_read_ever_less_often(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Init containers running (a stage's earlier steps, stage-in): Pending, and fine.
    busy = {"phase": "Pending", "initContainerStatuses": [
        {"name": "first", "state": {"running": {"startedAt": "2025-03-01T12:00:00Z"}}}]}
    kube, state, clock, _ = _reconcile_setup(monkeypatch, [busy])
    _pass(kube, state)
    reads = []
    for _ in range(40):  # 40 passes 30 s apart: 20 minutes
        clock[0] += stalled.STALL_SECONDS
        read, prog = _pass(kube, state)
        reads.append(read)
        assert prog["reason"] == "Running"
    # Read at 30, 90, 210, 450 and 930 s (then every 480 s): 5 reads, not 40.
    assert sum(reads) == 5, reads


def test_a_restart_keeps_a_stage_waiting_without_a_second_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The operator restarts (an upgrade, a failover) while a stage says why its pods do
    # not start: the new loop reads them at once, so the status keeps the reason instead
    # of dropping it for STALL_SECONDS and then setting it, and its Warning, again.
    stuck = pod([waiting("main", "ErrImagePull", 'pull "pyton:3.12": not found')])["status"]
    kube, state, clock, _ = _reconcile_setup(monkeypatch, [stuck])
    posted: list[str] = []
    monkeypatch.setattr(kube, "event", lambda _obj, _type, reason, _msg: posted.append(reason))

    def warnings() -> int:
        return posted.count("StagePodsWaiting")

    _pass(kube, state)
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = _pass(kube, state)
    assert read and prog["reason"] == "PodsNotStarting"
    assert warnings() == 1
    since = prog["lastTransitionTime"]
    restarted = pipelinerun.LoopState()
    clock[0] += 5
    read, prog = _pass(kube, restarted)
    assert read and prog["reason"] == "PodsNotStarting", prog
    assert prog["lastTransitionTime"] == since
    assert warnings() == 1
