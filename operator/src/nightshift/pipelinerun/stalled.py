"""Pods of a running stage that do not start, and why. Pure.

A pod whose image cannot be pulled, whose container cannot be created, or that no node
takes stays Pending: its Job counts it active and never ready, and the run would say only
"Running" while the reason sat in the pod's status. When a stage's Job has had active pods
and none ready for STALL_SECONDS, the I/O layer reads a few of its Pending pods (one LIST,
`limit` PODS_READ; reads back off while the pods say nothing); this module says what
they wait for and which field to check. The API server filters that LIST over the
namespace's pods, so it is read at most every STALL_SECONDS per stalled Job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightshift.api import podstate
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.spec import Stage

STALL_SECONDS = 30.0
MAX_READ_INTERVAL = 480.0
PODS_READ = 3
MESSAGE_CHARS = 400  # stages[].waiting; only while a stage's pods do not start
NOT_STARTING = "PodsNotStarting"
WAITING_FOR_NODES = "WaitingForNodes"
RUNNER_CONTAINERS = {"nightshift-stage-in", "nightshift-commit"}


def unready(job: Mapping[str, Any]) -> bool:
    """Active pods and none ready, in a Job that is neither finished nor suspended."""
    status = job.get("status") or {}
    if "ready" not in status:
        return False  # the Job controller always writes it; without it nothing is known
    if (job.get("spec") or {}).get("suspend"):
        return False
    if pg.job_condition(job, "Complete") or pg.job_condition(job, "Failed"):
        return False
    return int(status.get("active") or 0) > 0 and int(status.get("ready") or 0) == 0


def why(pod: Mapping[str, Any], stage: Stage, index: int,
        room: int = MESSAGE_CHARS) -> tuple[str, str] | None:
    """(reason, message) for one Pending pod, or None while it is merely starting.

    The message fits `room` characters with its fix whole: what is cut is the middle of
    the scheduler's or kubelet's words, which grow with the cluster (one clause per kind
    of node that refused the pod), never the field to check."""
    found = podstate.not_starting(pod)
    if found is None:
        return None
    if found.unschedulable:
        return WAITING_FOR_NODES, _fit(found.text(), (
            f"nodes may still be launching, else check spec.stages[{index}].resources "
            "and its pool's nodes"), room)
    fix = (f"check {image_field(stage, index, found.container)}" if found.image
           else f"kubectl describe pod {found.pod}")
    return NOT_STARTING, _fit(found.text(), fix, room)


def _fit(said: str, fix: str, room: int) -> str:
    keep = room - len(fix) - 2
    if len(said) > keep:
        said = said[:max(keep - 1, 0)] + "…"
    return f"{said}; {fix}"


def image_field(stage: Stage, index: int, container: str) -> str:
    """The spec field that names the container's image."""
    if container in RUNNER_CONTAINERS:
        return "spec.runnerImage (or the operator's runner image)"
    for j, step in enumerate(stage.steps):
        if step.name == container and step.image:
            return f"spec.stages[{index}].steps[{j}].image"
    return f"spec.stages[{index}].image"


def summary(stage: Stage, index: int, pods: Sequence[Mapping[str, Any]]
            ) -> tuple[str, str] | None:
    """The stage's one line: the first pod that says why. No counts or durations in it:
    the same state must give the same status, or every pass would write one."""
    head = f"stage {stage.name}: its pods do not start: "
    for pod in pods:
        found = why(pod, stage, index, MESSAGE_CHARS - len(head))
        if found:
            reason, message = found
            return reason, head + message
    return None


@dataclass
class Stall:
    """One Job's stall as the loop remembers it between passes (monotonic seconds)."""

    since: float
    next_read: float = 0.0
    interval: float = STALL_SECONDS
    found: tuple[str, str] | None = None

    def read(self, found: tuple[str, str] | None, now: float) -> None:
        """After a read: look again soon while the pods say why, back off while not."""
        self.found = found
        self.interval = (STALL_SECONDS if found
                         else min(self.interval * 2, MAX_READ_INTERVAL))
        self.next_read = now + self.interval


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


def run_message(stalled: Sequence[tuple[str, str]], room: int) -> str:
    """The run's Progressing message: the stalled stages' own messages, whole, as many
    as fit in `room`; the rest counted and pointed to. Cutting the joined text would cut
    the last stage's field to check, and with it the fix, out of the run's condition."""
    texts = [m for _, m in stalled]
    for shown in range(len(texts), 0, -1):
        rest = len(texts) - shown
        tail = (f"; and {rest} more stage{'s' if rest > 1 else ''} whose pods do not "
                "start: see status.stages[].waiting") if rest else ""
        text = "; ".join(texts[:shown]) + tail
        if len(text) <= room:
            return text
    return (f"{len(texts)} stages' pods do not start: see status.stages[].waiting")[:room]
