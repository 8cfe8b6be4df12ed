"""Pods that wait for their volumes (pipelinerun/unmounted.py): scheduled, no sandbox,
and only their events say why (the kubelet's FailedMount, the attach/detach
controller's FailedAttachVolume). Before, the stage read as merely starting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.api import names
from nightshift.pipelinerun import stalled, unmounted
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import run as manifest
from tests.bad_pipelineruns import stage
from tests.unit.test_stalled import _pass, _reconcile_setup

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOSTPATH = ('MountVolume.SetUp failed for volume "data" : hostPath type check failed: '
            "/srv/survey is not a directory")
MULTI = ('Multi-Attach error for volume "pvc-5f1c" Volume is already used by pod(s) '
         "nightly-calib-0-a1b2c")


def scheduled(sandbox: bool | None, *waiting: str) -> dict[str, Any]:
    conds = [{"type": "PodScheduled", "status": "True"}]
    if sandbox is not None:
        conds.append({"type": "PodReadyToStartContainers",
                      "status": "True" if sandbox else "False"})
    return {"phase": "Pending", "conditions": conds,
            "containerStatuses": [{"name": f"c{i}", "state": {"waiting": {"reason": r}}}
                                  for i, r in enumerate(waiting)]}


def event(reason: str, message: str, ago: float = 5, uid: str = "") -> dict[str, Any]:
    when = (NOW - timedelta(seconds=ago)).isoformat()
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"e{ago}-{reason}-{uid[-6:]}", "namespace": "physics"},
            "involvedObject": {"kind": "Pod", "uid": uid}, "type": "Warning",
            "reason": reason, "message": message, "lastTimestamp": when}


def one_stage() -> PipelineRunSpec:
    return PipelineRunSpec.model_validate(manifest([stage("calib")])["spec"])


def test_only_scheduled_pods_without_a_sandbox_wait_for_volumes() -> None:
    pod = {"status": scheduled(False, "ContainerCreating")}
    assert unmounted.waits_for_volumes(pod)
    assert not unmounted.waits_for_volumes({"status": scheduled(True, "PodInitializing")})
    # No PodReadyToStartContainers (an older kubelet): every container still to be made.
    assert unmounted.waits_for_volumes({"status": scheduled(None, "ContainerCreating",
                                                            "PodInitializing")})
    assert not unmounted.waits_for_volumes({"status": scheduled(None, "ContainerCreating",
                                                                "ErrImagePull")})
    assert not unmounted.waits_for_volumes({"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}})
    assert unmounted.first([{"status": scheduled(True)}, pod]) is pod


def test_a_mount_the_kubelet_refuses_names_the_storages_to_check() -> None:
    pod = {"metadata": {"name": "nightly-calib-1-x7"}, "status": scheduled(False)}
    found = unmounted.summary(one_stage().stages[0], 0, pod, [
        event("Scheduled", "Successfully assigned", 30), event("FailedMount", HOSTPATH, 5),
        event("FailedMount", "an older failure", 50)], NOW)
    assert found == (unmounted.WAITING_FOR_VOLUMES, (
        "stage calib: its pods do not start: pod nightly-calib-1-x7 waits for its volumes: "
        f"FailedMount: {HOSTPATH}; check the storages spec.stages[0] mounts and reads "
        "(spec.storage, and a SharedStorage's status)"))
    assert len(found[1]) <= stalled.MESSAGE_CHARS


def test_a_multi_attach_error_names_readwritemany_or_one_pod() -> None:
    pod = {"metadata": {"name": "nightly-calib-1-x7"}, "status": scheduled(False)}
    found = unmounted.summary(one_stage().stages[0], 0, pod,
                              [event("FailedAttachVolume", MULTI)], NOW)
    assert found is not None and f"FailedAttachVolume: {MULTI}" in found[1]
    assert found[1].endswith("a ReadWriteOnce volume attaches to one node at a time: give "
                             "spec.stages[0] a ReadWriteMany storage (an nfs or glusterfs "
                             "SharedStorage, EFS) or parallelism 1"), found[1]


def test_a_users_volume_is_named_before_the_kubelets_passing_configmap_cache_failure(
        ) -> None:
    """Under load the kubelet may fail to sync its ConfigMap cache for the items volume:
    newer, and passing, while the hostPath's failure holds the pod for good."""
    cache = ('MountVolume.SetUp failed for volume "nightshift-items" : failed to sync '
             "configmap cache: timed out waiting for the condition")
    pod = {"metadata": {"name": "nightly-calib-1-x7"}, "status": scheduled(False)}
    st = one_stage().stages[0]
    found = unmounted.summary(st, 0, pod, [event("FailedMount", HOSTPATH, 60),
                                           event("FailedMount", cache, 5)], NOW)
    assert found is not None and f"FailedMount: {HOSTPATH};" in found[1], found
    # Alone, the operator's own volume's failure is still said: it may be for good
    # (its ConfigMap deleted).
    found = unmounted.summary(st, 0, pod, [event("FailedMount", cache, 5)], NOW)
    assert found is not None and f"FailedMount: {cache};" in found[1], found


def test_an_items_configmap_deleted_by_hand_is_named_with_the_way_out() -> None:
    # The kubelet's words when the volume's ConfigMap is not there: no cache to wait for.
    gone = ('MountVolume.SetUp failed for volume "nightshift-items" : configmap '
            '"nightly-calib-items-0-ab12cd" not found')
    pod = {"metadata": {"name": "nightly-calib-1-x7"}, "status": scheduled(False)}
    found = unmounted.summary(one_stage().stages[0], 0, pod,
                              [event("FailedMount", gone, 5)], NOW)
    assert found is not None and found[1].endswith(
        "the run's ConfigMap nightly-calib-items-0-ab12cd (its frozen items) was deleted, "
        "and no pod of this stage starts without it: cancel the run (spec.cancel: true) "
        "and create a new one"), found
    # A user's own ConfigMap volume that is missing keeps the storage fix.
    theirs = ('MountVolume.SetUp failed for volume "calib" : configmap "calib" not found')
    found = unmounted.summary(one_stage().stages[0], 0, pod,
                              [event("FailedMount", theirs, 5)], NOW)
    assert found is not None and "check the storages spec.stages[0]" in found[1], found


def test_no_volume_event_or_only_old_ones_say_nothing() -> None:
    pod = {"metadata": {"name": "p"}, "status": scheduled(False)}
    st = one_stage().stages[0]
    assert unmounted.summary(st, 0, pod, [], NOW) is None
    assert unmounted.summary(st, 0, pod, [event("Pulling", "pulling image")], NOW) is None
    assert unmounted.summary(st, 0, pod, [event("FailedMount", HOSTPATH, 3600)], NOW) is None


def test_reconcile_reads_the_events_of_a_pod_that_waits_for_its_volumes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube, state, clock, _ = _reconcile_setup(monkeypatch, [scheduled(False,
                                                                      "ContainerCreating")])
    (ppath,) = [p for p in kube.store if "/pods/" in p]
    uid = kube.store[ppath]["metadata"]["uid"]
    recent = datetime.now(UTC)
    kube.put({**event("FailedMount", HOSTPATH, uid=uid),
              "lastTimestamp": recent.isoformat()})
    kube.put({**event("FailedMount", "someone else's", uid="uid-other"),
              "lastTimestamp": recent.isoformat()})
    read, _ = _pass(kube, state)
    assert not read  # not stalled long enough
    clock[0] += stalled.STALL_SECONDS + 1
    read, prog = _pass(kube, state)
    assert read and ("", "events", "list", "namespace") in kube.calls
    assert (prog["status"], prog["reason"]) == ("True", unmounted.WAITING_FOR_VOLUMES)
    assert prog["message"].startswith(
        "stage calib: its pods do not start: pod nightly-calib-0-x7 waits for its volumes: "
        f"FailedMount: {HOSTPATH}"), prog
    run = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")]
    assert run["status"]["stages"][0]["waiting"] == prog["message"]


def held_since(ago: float | None, now: datetime = NOW) -> dict[str, Any]:
    """A Pending pod scheduled `ago` seconds before `now` (None: no time on it), its
    container still to be made."""
    status = scheduled(False, "ContainerCreating")
    if ago is not None:
        status["conditions"][0]["lastTransitionTime"] = (
            now - timedelta(seconds=ago)).isoformat()
    return {"metadata": {"name": f"nightly-calib-{ago}-x7"}, "status": status}


def test_only_a_pod_held_for_the_stall_time_counts_while_others_run() -> None:
    fresh, old = held_since(5), held_since(stalled.STALL_SECONDS + 1)
    assert unmounted.held([fresh, held_since(None)], NOW) is None  # merely starting
    assert unmounted.held([fresh, {"status": scheduled(True)}, old], NOW) is old
    found = unmounted.some_summary(one_stage().stages[0], 0, old,
                                   [event("FailedAttachVolume", MULTI)], NOW)
    assert found is not None and found[0] == stalled.SOME_NOT_STARTING
    assert found[0] not in stalled.STOPPED  # the others run: the run progresses
    assert found[1].startswith("stage calib: some of its pods do not start while others "
                               f"run: pod nightly-calib-31.0-x7 waits for its volumes: "
                               f"FailedAttachVolume: {MULTI}; a ReadWriteOnce volume "
                               "attaches to one node at a time"), found[1]
    assert len(found[1]) <= stalled.MESSAGE_CHARS
    assert unmounted.some_summary(one_stage().stages[0], 0, old, [], NOW) is None
