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


def test_a_pod_merely_starting_says_nothing() -> None:
    assert stalled.why(pod([waiting("main", "ContainerCreating")]), CALIB, 0) is None
    assert stalled.why(pod(conditions=[{"type": "PodScheduled", "status": "True"}]),
                       CALIB, 0) is None
    assert stalled.summary(CALIB, 0, [pod([waiting("main", "ContainerCreating")])], 2,
                           40) is None


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
    why = (stalled.NOT_STARTING, "stage calib: 2 pods, none ready after 31 s: pod p "
           "container main: ImagePullBackOff; check spec.stages[0].image")
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


def test_waiting_for_nodes_is_still_progressing() -> None:
    run, job = _running(make_run([stage("calib", forEach={"items": ["a", "b"]})]))
    why = (stalled.WAITING_FOR_NODES, "stage calib: 2 pods, none ready after 31 s: ...")
    p = plan(replace(observe(run, jobs=[job], items=items_for(run, "calib", count=2)),
                     stalled={"calib": why}))
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("True", "WaitingForNodes")


def test_reconcile_reads_pending_pods_only_after_the_stall(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    clock = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.reconcile.time.monotonic", lambda: clock[0])
    kube = RecordingKube([make_run([stage("calib", image="pyton:3.12",
                                          forEach={"items": ["a", "b"]})])])
    state = pipelinerun.LoopState()
    config = OperatorConfig.from_env()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)  # creates the Job
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    job = kube.store[jpath]
    job["status"] = {"active": 2, "ready": 0}
    kube.put(job)
    kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "nightly-calib-0-x7", "namespace": "physics",
        "labels": {"batch.kubernetes.io/job-name": job["metadata"]["name"]}},
        "status": pod([waiting("main", "ErrImagePull", 'pull "pyton:3.12": not found')])[
            "status"]})
    kube.calls.clear()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    assert ("", "pods", "list", "namespace") not in kube.calls  # not stalled long enough
    clock[0] += stalled.STALL_SECONDS + 1
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    assert ("", "pods", "list", "namespace") in kube.calls
    run = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")]
    prog = next(c for c in run["status"]["conditions"] if c["type"] == "Progressing")
    assert prog["reason"] == "PodsNotStarting"
    assert prog["message"].startswith("stage calib: 2 pods, none ready after 31 s: pod "
                                      "nightly-calib-0-x7 container main: ErrImagePull")
    assert "check spec.stages[0].image" in prog["message"]
    # Its pods start: the Job is forgotten, nothing is read.
    job = copy.deepcopy(kube.store[jpath])
    job["status"] = {"active": 2, "ready": 2}
    kube.put(job)
    kube.calls.clear()
    pipelinerun.reconcile(kube, config, "physics", "nightly", state)
    assert ("", "pods", "list", "namespace") not in kube.calls
    assert state.unready_since == {}
