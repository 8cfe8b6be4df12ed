"""Pods of a stage that cannot start while its other pods run (an image one pool's nodes
cannot pull, a container's config) are said on the stage and the run, not only once
nothing else runs: a Job with some pods ready and more active has a page of its Pending
pods read (rarely while they say nothing), and the first that cannot start is named.
Pods merely starting or waiting for a node are not: a fan-out always has some."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.config import OperatorConfig
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun import stalled
from tests.bad_pipelineruns import stage
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import make_run
from tests.unit.test_stalled import CALIB, pod, waiting
from tests.unit.test_uncreated import partial

PULL = pod([waiting("main", "ErrImagePull", 'pull "pyton:3.12": no match for platform arm64')])
STARTING = pod([waiting("main", "ContainerCreating")])
NO_NODE = pod(conditions=[{"type": "PodScheduled", "status": "False",
                           "reason": "Unschedulable", "message": "0/3 nodes are available"}])


def _pass(kube: RecordingKube, state: pipelinerun.LoopState,
          event_selectors: list[str] | None = None) -> tuple[bool, dict[str, Any]]:
    """One pass: whether it read Pending pods (a running Job's Failed pods are read for
    evictions anyway), and the run's Progressing condition; the field selectors of its
    Event lists go to `event_selectors`."""
    lists: list[str] = []
    real = kube.list

    def listing(api_version: str, kind: str, *args: Any, **kw: Any) -> list[dict[str, Any]]:
        if kind == "Pod":
            lists.append(str(kw.get("field_selector")))
        elif kind == "Event" and event_selectors is not None:
            event_selectors.append(str(kw.get("field_selector")))
        return real(api_version, kind, *args, **kw)

    kube.list = listing  # type: ignore[method-assign]
    try:
        pipelinerun.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly", state)
    finally:
        del kube.list
    run = next(o for p, o in kube.store.items() if "/pipelineruns/" in p)
    prog = next(c for c in run["status"]["conditions"] if c["type"] == "Progressing")
    return "status.phase=Pending" in lists, prog


@pytest.mark.parametrize(("job", "some"), [
    (partial(active=4, ready=3), True),  # one of four not ready
    (partial(active=4, ready=4), False),
    (partial(active=4, ready=0), False),  # none ready: the whole stage is read ("pods")
    (partial(active=4, ready=3, terminating=1), False),  # a pod being replaced
    ({**partial(active=4, ready=3), "spec": {"parallelism": 4}}, False),  # not Indexed
])
def test_which_jobs_have_some_pods_not_ready(job: dict[str, Any], some: bool) -> None:
    assert stalled.some_unready(job) is some
    assert stalled.to_read(job, None) == ("more" if some else
                                          "pods" if job["status"]["ready"] == 0 else "")


def test_the_first_pod_that_cannot_start_is_named_never_one_starting_or_unplaced() -> None:
    assert stalled.some_summary(CALIB, 0, [STARTING, NO_NODE]) is None
    found = stalled.some_summary(CALIB, 0, [STARTING, NO_NODE, PULL])
    assert found == (stalled.SOME_NOT_STARTING, (
        "stage calib: some of its pods do not start while others run: pod nightly-calib-0-x7 "
        'container main: ErrImagePull: pull "pyton:3.12": no match for platform arm64; '
        "check spec.stages[0].image"))
    assert found[0] not in stalled.STOPPED  # the others run: the run progresses


def _running(monkeypatch: pytest.MonkeyPatch, ready: int, pending: list[dict[str, Any]]
             ) -> tuple[RecordingKube, pipelinerun.LoopState, list[float], str]:
    """A run whose stage Job (parallelism 3) has 3 pods active and `ready` of them
    ready, with `pending` as its Pending pods; a clock the loop reads."""
    clock = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.observe.time.monotonic", lambda: clock[0])
    kube = RecordingKube([make_run([stage("calib", image="pyton:3.12", parallelism=3,
                                          forEach={"items": list("abcdef")})])])
    state = pipelinerun.LoopState()
    pipelinerun.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly", state)
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    job = kube.store[jpath]
    job["status"] = {"active": 3, "ready": ready, "startTime": "2026-11-29T11:59:00Z"}
    kube.put(job)
    for i, p in enumerate(pending):
        kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"nightly-calib-{i}-x7", "namespace": "physics",
            "labels": job["spec"]["template"]["metadata"]["labels"]}, "status": p["status"]})
    return kube, state, clock, jpath


def test_reconcile_names_them_while_the_others_run(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, state, clock, jpath = _running(monkeypatch, 1, [STARTING, PULL])
    read, prog = _pass(kube, state)
    assert not read and prog["reason"] == "Running"  # not for STALL_SECONDS yet
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = _pass(kube, state)
    assert read
    assert (prog["status"], prog["reason"]) == ("True", stalled.SOME_NOT_STARTING)
    assert prog["message"].startswith("stage calib: some of its pods do not start while "
                                      "others run: pod nightly-calib-1-x7 container main: "
                                      "ErrImagePull")
    run = next(o for p, o in kube.store.items() if "/pipelineruns/" in p)
    (rec,) = run["status"]["stages"]
    assert rec["waiting"] == prog["message"]
    # Every pod ready: the Job is forgotten, nothing is read, the line goes.
    job = copy.deepcopy(kube.store[jpath])
    job["status"] = {"active": 3, "ready": 3, "startTime": "2026-11-29T11:59:00Z"}
    kube.put(job)
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = _pass(kube, state)
    assert not read and prog["reason"] == "Running"
    run = next(o for p, o in kube.store.items() if "/pipelineruns/" in p)
    assert "waiting" not in run["status"]["stages"][0]


def test_a_churning_stage_whose_pods_only_start_is_read_ever_less_often(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube, state, clock, _ = _running(monkeypatch, 2, [STARTING])
    reads = []
    for _ in range(40):  # 40 passes 30 s apart: 20 minutes
        clock[0] += stalled.STALL_SECONDS
        read, prog = _pass(kube, state)
        reads.append(read)
        assert prog["reason"] == "Running"
    assert sum(reads) == 5, reads  # at 30, 90, 210, 450 and 930 s, then every 480 s


def _held(ago: float) -> dict[str, Any]:
    """A Pending pod scheduled `ago` seconds before now, still without its sandbox."""
    when = (datetime.now(UTC) - timedelta(seconds=ago)).isoformat()
    return pod([waiting("main", "ContainerCreating")], conditions=[
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": when},
        {"type": "PodReadyToStartContainers", "status": "False"}])


def _volume_event(kube: RecordingKube, pod_name: str, message: str) -> None:
    (path,) = [p for p in kube.store if p.endswith(f"/pods/{pod_name}")]
    kube.put({"apiVersion": "v1", "kind": "Event",
              "metadata": {"name": f"{pod_name}.attach", "namespace": "physics"},
              "involvedObject": {"kind": "Pod", "uid": kube.store[path]["metadata"]["uid"]},
              "type": "Warning", "reason": "FailedAttachVolume", "message": message,
              "lastTimestamp": datetime.now(UTC).isoformat()})


def test_reconcile_names_a_pod_held_by_its_volume_while_the_others_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ReadWriteOnce claim's disk is attached to the node of the pods that run: a pod
    on another node waits for it, and only its events say so."""
    multi = ('Multi-Attach error for volume "pvc-5f1c" Volume is already used by pod(s) '
             "nightly-calib-0-x7")
    kube, state, clock, _ = _running(monkeypatch, 2, [STARTING, _held(5)])
    _volume_event(kube, "nightly-calib-1-x7", multi)
    (path,) = [p for p in kube.store if p.endswith("/pods/nightly-calib-1-x7")]
    read, prog = _pass(kube, state)
    assert not read  # not for STALL_SECONDS yet
    selectors: list[str] = []
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = _pass(kube, state, selectors)
    # Scheduled 5 s ago: it merely starts; its events are not read, nothing is said.
    assert read and prog["reason"] == "Running"
    assert not [s for s in selectors if f"uid-{path}" in s], selectors
    # The same pod, scheduled long enough ago: named from its event, the run goes on.
    kube.store[path]["status"] = _held(stalled.STALL_SECONDS + 30)["status"]
    clock[0] += stalled.MAX_READ_INTERVAL
    read, prog = _pass(kube, state)
    assert read and (prog["status"], prog["reason"]) == ("True", stalled.SOME_NOT_STARTING)
    assert prog["message"].startswith(
        "stage calib: some of its pods do not start while others run: pod "
        f"nightly-calib-1-x7 waits for its volumes: FailedAttachVolume: {multi}; a "
        "ReadWriteOnce volume attaches to one node at a time"), prog["message"]
