"""Pods of a stalled stage that wait for their volumes, and what was said of them. Pure.

A pod whose volume cannot be attached or mounted (an NFS server that does not answer, a
claim's disk attached to another node, a hostPath that is not there) is scheduled but
never gets its sandbox: its containers wait in ContainerCreating or PodInitializing,
which is how every pod starts, so its status alone says nothing. Only the pod's events
say why: the kubelet's FailedMount and the attach/detach controller's
FailedAttachVolume. When none of a stalled stage's Pending pods says why from its status
(stalled.summary), the I/O layer reads the events of the first that waits for its
volumes (one LIST by its uid), and this says what they mean and where to look.

A stage some of whose pods run while others wait for their volumes (a ReadWriteOnce
claim's disk attached to the node of the ones that run) is read the same way, from its
page of Pending pods, but only for a pod scheduled STALL_SECONDS ago and still without
its sandbox: every starting pod waits for its volumes a moment, and its volume events
are often transient ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nightshift.api import refusals
from nightshift.api.conditions import find
from nightshift.pipelinerun.runnerparts import (
    VOLUME_BIN,
    VOLUME_GATHER_PREFIX,
    VOLUME_ITEMS,
    VOLUME_WORK,
)
from nightshift.pipelinerun.spec import Stage
from nightshift.pipelinerun.stalled import (
    MESSAGE_CHARS,
    SOME_NOT_STARTING,
    STALL_SECONDS,
    fit,
    some_head,
    stall_head,
)

WAITING_FOR_VOLUMES = "WaitingForVolumes"
# The events that say why a volume is not there, in the kubelet's or the attach/detach
# controller's words.
VOLUME_EVENTS = frozenset({"FailedMount", "FailedAttachVolume", "FailedMapVolume"})
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})
# The operator's own ConfigMap and emptyDir volumes. The kubelet's failures to set them up
# are mostly its own cache's, and pass ("failed to sync configmap cache: timed out
# waiting for the condition", seen under load), while another volume's may hold the pod
# for good: that one is named first.
_GONE_CONFIGMAP = re.compile(r'configmaps? "([^"]+)" not found')
_OWN_VOLUME = re.compile('for volume "(?:' + "|".join(re.escape(v) for v in (
    VOLUME_ITEMS, VOLUME_WORK, VOLUME_BIN)) + "|" + re.escape(VOLUME_GATHER_PREFIX) + '[^"]*)"')


def waits_for_volumes(pod: Mapping[str, Any]) -> bool:
    """Scheduled, and without its sandbox: the kubelet makes none before the volumes are
    mounted (PodReadyToStartContainers, or, without that condition, every container
    still waiting to be created)."""
    status = pod.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conds.get("PodScheduled") != "True":
        return False
    if "PodReadyToStartContainers" in conds:
        return bool(conds["PodReadyToStartContainers"] != "True")
    waiting = [((cs.get("state") or {}).get("waiting") or {}).get("reason")
               for cs in [*(status.get("initContainerStatuses") or []),
                          *(status.get("containerStatuses") or [])]]
    return bool(waiting) and all(r in _STARTING for r in waiting)


def first(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((p for p in pods if waits_for_volumes(p)), None)


def held(pods: Sequence[Mapping[str, Any]], now: datetime) -> Mapping[str, Any] | None:
    """The first of `pods` scheduled at least STALL_SECONDS before `now` and still without
    its sandbox: one that does not merely start."""
    for pod in pods:
        if not waits_for_volumes(pod):
            continue
        cond = find((pod.get("status") or {}).get("conditions"), "PodScheduled")
        since = refusals.parse_time((cond or {}).get("lastTransitionTime"))
        if since is not None and (now - since).total_seconds() >= STALL_SECONDS:
            return pod
    return None


def summary(stage: Stage, index: int, pod: Mapping[str, Any],
            events: Sequence[Mapping[str, Any]], now: datetime) -> tuple[str, str] | None:
    """The stage's line from `pod`'s events (its newest of the last
    refusals.EVENT_WINDOW about a volume, one not the operator's own first), or None
    when none says why."""
    head = stall_head(stage)
    said = _said(index, pod, events, now, MESSAGE_CHARS - len(head))
    return None if said is None else (WAITING_FOR_VOLUMES, head + said)


def some_summary(stage: Stage, index: int, pod: Mapping[str, Any],
                 events: Sequence[Mapping[str, Any]], now: datetime
                 ) -> tuple[str, str] | None:
    """The line of a stage whose other pods run, from a `held` pod's events: the others
    go on, so the run still progresses (stalled.SOME_NOT_STARTING)."""
    head = some_head(stage)
    said = _said(index, pod, events, now, MESSAGE_CHARS - len(head))
    return None if said is None else (SOME_NOT_STARTING, head + said)


def _said(index: int, pod: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
          now: datetime, room: int) -> str | None:
    """The newest volume event's words and fix; one about a volume not the operator's
    own before any that is (_OWN_VOLUME)."""
    about = [e for e in events if e.get("reason") in VOLUME_EVENTS]
    newest = refusals.latest([e for e in about if not _OWN_VOLUME.search(
        str(e.get("message") or ""))], now) or refusals.latest(about, now)
    if newest is None:
        return None
    reason, said = newest.get("reason"), " ".join(refusals.clean(
        str(newest.get("message") or "")).split())
    gone = _GONE_CONFIGMAP.search(said) if _OWN_VOLUME.search(said) else None
    if gone:
        # Not the kubelet's cache: our items (or a gathered stage's) ConfigMap is not
        # there, deleted by hand. The items are frozen in it; nothing remakes them.
        fix = (f"the run's ConfigMap {gone.group(1)} (its frozen items) was deleted, and "
               "no pod of this stage starts without it: cancel the run (spec.cancel: "
               "true) and create a new one")
    elif "Multi-Attach" in said:
        fix = (f"a ReadWriteOnce volume attaches to one node at a time: give "
               f"spec.stages[{index}] a ReadWriteMany storage (an nfs or glusterfs "
               "SharedStorage, EFS) or parallelism 1")
    else:
        fix = (f"check the storages spec.stages[{index}] mounts and reads (spec.storage, "
               "and a SharedStorage's status)")
    name = (pod.get("metadata") or {}).get("name", "")
    return fit(f"pod {name} waits for its volumes: {reason}: {said}", fix, room)
