"""Pods of a running stage that do not start, and why. Pure.

A pod whose image cannot be pulled, whose container cannot be created, or that no node
takes stays Pending: its Job counts it active and never ready, and the run would say only
"Running" while the reason sat in the pod's status. When a stage's Job has had active pods
and none ready for STALL_SECONDS, the I/O layer reads a few of its Pending pods (one LIST,
`limit` PODS_READ; reads back off while the pods say nothing); this module says what
they wait for and which field to check. The API server filters that LIST over the
namespace's pods, so it is read at most every STALL_SECONDS per stalled Job.

Pods the Job controller cannot create at all (a full ResourceQuota, a LimitRange, the
namespace's Pod Security level, an admission webhook) leave no pod to read: the Job
has none active, and the API server's refusal is only in the Job controller's
FailedCreate events. A Job with no pod for STALL_SECONDS has those events read (one
LIST by its uid) on the same schedule, and the newest says why. An MPI stage's MPIJob
counts only Running workers, so one with fewer running than it asks has its Pending
pods read, and if none is Pending, the MPI Operator's MPIJobFailed events.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nightshift.api import podstate, ranges
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.spec import Stage

STALL_SECONDS = 30.0
MAX_READ_INTERVAL = 480.0
PODS_READ = 3
MESSAGE_CHARS = 400  # stages[].waiting; only while a stage's pods do not start
NOT_STARTING = "PodsNotStarting"
WAITING_FOR_NODES = "WaitingForNodes"
NOT_CREATED = "PodsNotCreated"
WAITING_FOR_QUOTA = "WaitingForQuota"
# Reasons that do not clear by themselves: the run's Progressing is False while one holds.
STOPPED = frozenset({NOT_STARTING, NOT_CREATED})
# The recorder folds a Job's repeated refusals into one Event after ten, so a Job holds
# a few dozen at most within the hour Events live; a LIST's limit takes them in name
# order, not time order, so it must take them all.
EVENTS_READ = 100
# The Job controller retries a refused create with a backoff of up to minutes, and the
# API server folds the same refusal into one Event whose last time moves: an Event
# older than this says nothing of the Job's present.
EVENT_WINDOW = 600.0
RUNNER_CONTAINERS = {"nightshift-stage-in", "nightshift-commit"}


def unready(job: Mapping[str, Any]) -> bool:
    """Active pods and none ready, in a Job that is neither finished nor suspended."""
    status = job.get("status") or {}
    if "ready" not in status:
        return False  # the Job controller always writes it; without it nothing is known
    return (_live(job) and int(status.get("active") or 0) > 0
            and int(status.get("ready") or 0) == 0)


def uncreated(job: Mapping[str, Any]) -> bool:
    """A started stage Job, neither finished nor suspended, with no pod at all: none
    active and none terminating (a pod being replaced holds its index until it is gone)."""
    return _going(job) and int((job.get("status") or {}).get("active") or 0) == 0


def throttled(job: Mapping[str, Any]) -> bool:
    """A started stage Job with some pods running and ready, but fewer than it may run:
    both its parallelism and its items left exceed its active pods. A full quota holds
    it there (its FailedCreate events say so); so, briefly, do its own ramp-up and
    per-item retry back-offs (their events say nothing, and nothing is said)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    active = int(status.get("active") or 0)
    left = (int(spec.get("completions") or 0) - int(status.get("succeeded") or 0)
            - ranges.count(status.get("failedIndexes")))
    return (_going(job) and int(status.get("ready") or 0) > 0
            and 0 < active < min(int(spec.get("parallelism") or 0), left))


def workers_short(job: Mapping[str, Any], workers: int) -> bool:
    """An MPI stage's MPIJob (read as a Job, mpijob.as_job), neither finished nor
    suspended, with fewer workers running than it asks: the MPI Operator counts only
    Running workers active, so Pending and never-made workers look alike here."""
    return _live(job) and int((job.get("status") or {}).get("active") or 0) < workers


def to_read(job: Mapping[str, Any], mpi_workers: int | None) -> str:
    """What a stalled Job has read (Stall.what), or "" while it is not stalled: an MPI
    stage's Job (`mpi_workers`) short of running workers, "mpi"; a Job whose pods are
    active and none ready, "pods"; with no pod at all, "events"; held to fewer pods
    than it may run, "more"."""
    if mpi_workers is not None:
        return "mpi" if workers_short(job, mpi_workers) else ""
    return ("pods" if unready(job) else "events" if uncreated(job) else
            "more" if throttled(job) else "")


def _live(job: Mapping[str, Any]) -> bool:
    """Neither suspended nor finished."""
    if (job.get("spec") or {}).get("suspend"):
        return False
    return not (pg.job_condition(job, "Complete") or pg.job_condition(job, "Failed"))


def _going(job: Mapping[str, Any]) -> bool:
    """A started Indexed Job, neither finished nor suspended, none of whose pods is
    being replaced (a terminating pod holds its index until it is gone)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    if spec.get("completionMode") != "Indexed":
        return False  # an MPIJob's workers are the MPI Operator's, read as a Job
    if not status.get("startTime") or not int(spec.get("parallelism") or 0):
        return False
    return _live(job) and int(status.get("terminating") or 0) == 0


def not_created(stage: Stage, index: int, job: str, events: Sequence[Mapping[str, Any]],
                now: datetime, mpi: bool = False, some: bool = False
                ) -> tuple[str, str] | None:
    """(reason, message) from the newest refusal among a Job's (or, `mpi`, an MPIJob's)
    events of the last EVENT_WINDOW seconds, or None. `some`: the Job has pods running,
    and only a full quota is said (what else refuses pods refuses them all). The message
    ends with what to check, kept whole."""
    dated = [(t, said) for e in events if (said := _refusal(e)) is not None
             and (t := _event_time(e)) is not None]
    if not dated:
        return None
    when, said = max(dated, key=lambda ts: ts[0])
    if (now - when).total_seconds() > EVENT_WINDOW:
        return None
    who, size = ("the MPI Operator", "mpi.workers") if mpi else ("the Job controller",
                                                                  "parallelism")
    if some and "exceeded quota" not in said:
        return None
    head = f"stage {stage.name}: {who} cannot create {'more of ' if some else ''}its pods: "
    reason, fix = NOT_CREATED, f"kubectl describe {'mpijob' if mpi else 'job'} {job}"
    if "exceeded quota" in said:
        reason, fix = WAITING_FOR_QUOTA, (
            "pods are created as the namespace's ResourceQuota frees up; else raise it or "
            f"lower spec.stages[{index}].{size} or resources")
    elif "violates PodSecurity" in said:
        fix = ("check the namespace's pod-security.kubernetes.io/enforce level against "
               f"spec.stages[{index}] and its storage (docs/security.md)")
    elif " per Container is " in said or " per Pod is " in said:
        fix = f"check spec.stages[{index}].resources against the namespace's LimitRange"
    return reason, head + _fit(said, fix, MESSAGE_CHARS - len(head))


# The events that carry a refused pod create, by reason, and the words before the API
# server's: the Job controller's (k8s.io/kubernetes pkg/controller/controller_utils.go)
# and the MPI Operator's (github.com/kubeflow/mpi-operator pkg/controller).
JOB_REFUSED, MPI_REFUSED = "FailedCreate", "MPIJobFailed"
REFUSAL_EVENTS = {JOB_REFUSED: ("Error creating: ",),
                  MPI_REFUSED: ("worker pod created failed: ", "launcher pod created failed: ")}


def _refusal(event: Mapping[str, Any]) -> str | None:
    """The API server's refusal an event carries, without what changes from one retry
    to the next (the pod's generated name, the quota's current use, the recorder's
    fold), so a pass that finds the same refusal writes nothing; None for another event."""
    said = str(event.get("message") or "").strip()
    said = said.removeprefix("(combined from similar events): ")
    prefix = next((p for p in REFUSAL_EVENTS.get(str(event.get("reason")), ())
                   if said.startswith(p)), None)
    if prefix is None:
        return None
    said = re.sub(r'^pods "[^"]*" is forbidden: ', "", said[len(prefix):])
    return re.sub(r", used: \S+, limited: ", ", limited: ", said)


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    """When an Event last happened: its series, its last timestamp, its time, its birth."""
    for raw in ((event.get("series") or {}).get("lastObservedTime"), event.get("lastTimestamp"),
                event.get("eventTime"), (event.get("metadata") or {}).get("creationTimestamp")):
        if raw:
            try:
                return datetime.fromisoformat(str(raw))
            except ValueError:
                continue
    return None


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
    # What is read: "pods" (Pending ones), "events" (refusals; "more": while some pods
    # run), "mpi" (pods, then events)
    what: str = "pods"
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
        tail = (f"; and {rest} more stage{'s' if rest > 1 else ''} waiting: see "
                "status.stages[].waiting") if rest else ""
        text = "; ".join(texts[:shown]) + tail
        if len(text) <= room:
            return text
    return f"{len(texts)} stages waiting: see status.stages[].waiting"[:room]
