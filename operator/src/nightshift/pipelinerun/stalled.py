"""Pods of a running stage that do not start, and why. Pure.

A pod whose image cannot be pulled, whose container cannot be created, or that no node
takes stays Pending: its Job counts it active and never ready, and the run would say only
"Running" while the reason sat in the pod's status. When a stage's Job has had active pods
and none ready for STALL_SECONDS, the I/O layer reads a few of its Pending pods (one LIST,
`limit` PODS_READ); this module says what they wait for and which field to check. Cost:
O(stalled stages) reads, never O(pods).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.spec import Stage

STALL_SECONDS = 30.0
PODS_READ = 3
MESSAGE_CHARS = 400  # stages[].waiting; only while a stage's pods do not start
NOT_STARTING = "PodsNotStarting"
WAITING_FOR_NODES = "WaitingForNodes"
# Container waiting reasons that do not clear by themselves: the kubelet retries a pull,
# but a wrong name, a missing tag or a private registry without credentials stays so.
IMAGE = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
CONFIG = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
RUNNER_CONTAINERS = {"nightshift-stage-in", "nightshift-commit"}


def unready(job: Mapping[str, Any]) -> bool:
    """Active pods and none ready, in a Job that is neither finished nor suspended."""
    status = job.get("status") or {}
    if "ready" not in status:
        return False  # the Job controller always writes it; without it nothing is known
    if (job.get("spec") or {}).get("suspend"):
        return False
    if any(c.get("status") == "True" and c.get("type") in ("Complete", "Failed")
           for c in status.get("conditions") or []):
        return False
    return int(status.get("active") or 0) > 0 and int(status.get("ready") or 0) == 0


def why(pod: Mapping[str, Any], stage: Stage, index: int) -> tuple[str, str] | None:
    """(reason, message) for one Pending pod, or None while it is merely starting."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in IMAGE or reason in CONFIG:
            container = str(cs.get("name"))
            fix = (f"check {image_field(stage, index, container)}" if reason in IMAGE else
                   f"kubectl describe pod {name}")
            return NOT_STARTING, (f"pod {name} container {container}: {reason}: "
                                  f"{waiting.get('message') or ''}".rstrip(": ")
                                  + f"; {fix}")
    for c in status.get("conditions") or []:
        if (c.get("type") == "PodScheduled" and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"):
            return WAITING_FOR_NODES, (
                f"pod {name} is not scheduled: {c.get('message') or 'no node fits'}; nodes "
                f"may still be launching, else check spec.stages[{index}].resources and "
                f"its pool's nodes")
    return None


def image_field(stage: Stage, index: int, container: str) -> str:
    """The spec field that names the container's image."""
    if container in RUNNER_CONTAINERS:
        return "spec.runnerImage (or the operator's runner image)"
    for j, step in enumerate(stage.steps):
        if step.name == container and step.image:
            return f"spec.stages[{index}].steps[{j}].image"
    return f"spec.stages[{index}].image"


def summary(stage: Stage, index: int, pods: Sequence[Mapping[str, Any]], active: int,
            seconds: float) -> tuple[str, str] | None:
    """The stage's one line: the first pod that says why, with how long and how many."""
    for pod in pods:
        found = why(pod, stage, index)
        if found:
            reason, message = found
            return reason, (f"stage {stage.name}: {active} pods, none ready after "
                            f"{int(seconds)} s: {message}")
    return None


def mark(records: Sequence[dict[str, Any]], found: Mapping[str, tuple[str, str]]
         ) -> list[tuple[str, str]]:
    """Sets stages[].waiting on each running stage in `found`; their (reason, message)."""
    out = []
    for rec in records:
        why_ = found.get(rec["name"])
        if why_ and rec["phase"] == pg.RUNNING:
            rec["waiting"] = why_[1][:MESSAGE_CHARS]
            out.append(why_)
    return out
