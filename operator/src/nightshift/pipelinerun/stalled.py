"""Pods of a running stage that do not start, and why. Pure.

A pod whose image cannot be pulled, whose container cannot be created, or that no node
takes stays Pending: its Job counts it active and never ready, and the run would say only
"Running" while the reason sat in the pod's status. When a stage's Job has had active pods
and none ready for STALL_SECONDS, the I/O layer reads a few of its Pending pods (one LIST,
`limit` PODS_READ; reads back off while the pods say nothing); this module says what
they wait for and which field to check. The API server filters that LIST over the
namespace's pods, so it is read at most every STALL_SECONDS per stalled Job.

Some pods that cannot start while the stage's others run (an image one pool's nodes
cannot pull) would hold their items until nothing else ran. So a Job with some pods
ready and more active, for STALL_SECONDS, has a page of its Pending pods read
(SOME_PODS_READ; in a churning fan-out that is most of the time, and the reads back off
to every MAX_READ_INTERVAL while the pods say nothing); only a pod that cannot start is
named (SOME_NOT_STARTING), or, from its events, one scheduled STALL_SECONDS ago and
still without its volumes (unmounted.held); never one waiting for a node, and the run
still progresses.

Pods the Job controller cannot create at all (a full ResourceQuota, a LimitRange, the
namespace's Pod Security level, an admission webhook) leave no pod to read: the Job
has none active, and the API server's refusal is only in the Job controller's
FailedCreate events. A Job with no pod for STALL_SECONDS has those events read (one
LIST by its uid) on the same schedule, and the newest says why. An MPI stage's MPIJob
counts only Running workers, so one with fewer running than it asks has its Pending
pods read, and if none is Pending, the MPI Operator's MPIJobFailed events. One with every
worker running and no launcher running is held by its launcher: not made while a worker
is not Ready (its sshd does not answer), or made and its pod Pending or refused (the
launcher Job's own FailedCreate events).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nightshift.api import podstate, ranges, refusals
from nightshift.pipelinerun import mpijob
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
# Some pods of a stage that runs do not start, for a reason that does not clear by
# itself (an image one pool's nodes cannot pull, a container's config): the stage goes
# on with the others, so Progressing stays True, but those items wait until it is fixed.
SOME_NOT_STARTING = "SomePodsNotStarting"
# Pending pods read from a stage whose other pods run: in a churning fan-out most
# Pending pods are merely starting, so the few that do not are looked for among more.
SOME_PODS_READ = 20
# An MPI stage's MPIJob the MPI Operator has not acted on: its CRD is installed, its
# controller is not running (or ignores the MPIJob).
WAITING_FOR_MPI_OPERATOR = "WaitingForMPIOperator"
# Reasons that do not clear by themselves: the run's Progressing is False while one holds.
STOPPED = frozenset({NOT_STARTING, NOT_CREATED, WAITING_FOR_MPI_OPERATOR})
# A stage held before its launcher is made reads its Running workers for one not Ready:
# MPI stages have tens of workers, and usually all or none of them answer.
WORKERS_READ = 100
RUNNER_CONTAINERS = {"nightshift-stage-in", "nightshift-commit"}


def unready(job: Mapping[str, Any]) -> bool:
    """Active pods and none ready, in a Job that is neither finished nor suspended."""
    status = job.get("status") or {}
    if "ready" not in status:
        return False  # the Job controller always writes it; without it nothing is known
    return (live(job) and int(status.get("active") or 0) > 0
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


def some_unready(job: Mapping[str, Any]) -> bool:
    """A started stage Job with some pods ready and more active: pods starting, or some
    that do not start while the others run (which only their own status says)."""
    status = job.get("status") or {}
    return _going(job) and 0 < int(status.get("ready") or 0) < int(status.get("active") or 0)


def workers_short(job: Mapping[str, Any], workers: int) -> bool:
    """An MPI stage's MPIJob (read as a Job, mpijob.as_job), neither finished nor
    suspended, with fewer workers running than it asks: the MPI Operator counts only
    Running workers active, so Pending and never-made workers look alike here."""
    return live(job) and int((job.get("status") or {}).get("active") or 0) < workers


def launcher_short(job: Mapping[str, Any], workers: int) -> str:
    """An MPI stage's MPIJob, neither finished nor suspended, every worker running and
    no launcher running: "gang" while the launcher is not made (the MPI Operator makes it
    once every worker is Ready), "launcher" once made; else ""."""
    status = job.get("status") or {}
    if not live(job) or int(status.get("active") or 0) < workers:
        return ""
    launcher = status.get(mpijob.LAUNCHER_RUNNING)
    return "gang" if launcher is None else "" if int(launcher) else "launcher"


def to_read(job: Mapping[str, Any], mpi_workers: int | None) -> str:
    """What a stalled Job has read (Stall.what), or "" while it is not stalled: an MPI
    stage's Job (`mpi_workers`) short of running workers, "mpi"; with every worker
    running, "gang" or "launcher" (launcher_short); a Job whose pods are active and
    none ready, "pods"; with no pod at all, "events"; with some pods ready, held to fewer
    than it may run or with more active than ready, "more" (one state for both: a
    churning fan-out moves between them from pass to pass)."""
    if mpi_workers is not None:
        return ("mpi" if workers_short(job, mpi_workers) else
                launcher_short(job, mpi_workers))
    return ("pods" if unready(job) else "events" if uncreated(job) else
            "more" if throttled(job) or some_unready(job) else "")


def live(job: Mapping[str, Any]) -> bool:
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
    return live(job) and int(status.get("terminating") or 0) == 0


@dataclass(frozen=True)
class Maker:
    """Who creates a stage's pods, and so whose refusal events say why there are none."""

    who: str
    makes: str  # what it cannot create
    quota: str  # the fix while a ResourceQuota is full, with {i} for the stage's index
    resources: str  # the stage field a LimitRange checks
    kind: str  # what `kubectl describe` shows the events of


_QUOTA = "pods are created as the namespace's ResourceQuota frees up; else raise it or lower "
MAKERS = {
    "job": Maker("the Job controller", "its pods",
                 _QUOTA + "spec.stages[{i}].parallelism or resources", "resources", "job"),
    "mpi": Maker("the MPI Operator", "its pods",
                 _QUOTA + "spec.stages[{i}].mpi.workers or resources", "resources", "mpijob"),
    # The launcher's pod is created after every worker runs: if the workers filled the
    # quota, only other pods' ends free it.
    "launcher": Maker("the Job controller", "its MPI launcher's pod", (
        "it is created as the namespace's ResourceQuota frees up, but the stage's running "
        "workers hold their share until it runs; else raise the quota or lower "
        "spec.stages[{i}].mpi.launcherResources or resources"),
        "mpi.launcherResources", "job"),
}


def not_created(stage: Stage, index: int, job: str, events: Sequence[Mapping[str, Any]],
                now: datetime, whose: str = "job", some: bool = False,
                after: datetime | None = None) -> tuple[str, str] | None:
    """(reason, message) from the newest refusal among a Job's (`whose`: see MAKERS)
    recent events (refusals.newest), or None. `some`: the Job has pods running, and only
    a full quota is said (what else refuses pods refuses them all). The message ends
    with what to check, kept whole. `job` names what to describe."""
    got = refusals.newest(events, now, REFUSAL_EVENTS, after)
    if got is None:
        return None
    pattern, said = got
    guard = refusals.kind(said)
    if some and guard != "quota":
        return None
    maker = MAKERS[whose]
    makes = "its launcher Job" if pattern == _LAUNCHER_REFUSED else maker.makes
    head = (f"stage {stage.name}: {maker.who} cannot create {'more of ' if some else ''}"
            f"{makes}: ")
    reason, fix = NOT_CREATED, f"kubectl describe {maker.kind} {job}"
    if guard == "quota":
        reason, fix = WAITING_FOR_QUOTA, maker.quota.format(i=index)
    elif guard == "podsecurity":
        fix = ("check the namespace's pod-security.kubernetes.io/enforce level against "
               f"spec.stages[{index}] and its storage (docs/security.md)")
    elif guard == "limitrange":
        fix = (f"check spec.stages[{index}].{maker.resources} against the namespace's "
               "LimitRange")
    return reason, head + fit(said, fix, MESSAGE_CHARS - len(head))


def mpi_unsynced(stage: Stage, job: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) for an MPIJob (read as a Job, mpijob.as_job) without a status,
    or None; for when neither its pods nor its events said why (observe.py). The MPI
    Operator's first sync writes a status unless creating a worker fails, and that
    failure is in its events; with neither, it never synced the MPIJob, so no worker,
    launcher or event will come and nothing else would say why the stage does not move."""
    if (job.get("status") or {}).get(mpijob.OPERATOR_SEEN, True):
        return None
    name = (job.get("metadata") or {}).get("name", "")
    head = f"stage {stage.name}: "
    return WAITING_FOR_MPI_OPERATOR, head + fit(
        f"the MPI Operator has not acted on MPIJob {name} in {STALL_SECONDS:g} s (it has "
        "no status)",
        "check that the Kubeflow MPI Operator's controller runs (its Deployment, in its "
        f"own namespace) and its log; kubectl describe mpijob {name} shows a "
        "ValidationError it found (docs/mpi.md)", MESSAGE_CHARS - len(head))


def workers_unready(stage: Stage, index: int, pods: Sequence[Mapping[str, Any]]
                    ) -> tuple[str, str] | None:
    """(reason, message) for the first Running MPI worker that is not Ready, or None. The
    MPI Operator makes the launcher only once every worker is Ready, and a worker is Ready
    once its sshd answers on the ssh port: one whose sshd never starts holds the stage
    with every pod running, and nothing else says so."""
    mpi = stage.mpi
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if status.get("phase") != "Running" or not any(
                c.get("name") == mpijob.WORKER_CONTAINER for c in spec.get("containers") or []):
            continue
        if podstate.ready(pod):
            continue
        name = (pod.get("metadata") or {}).get("name", "")
        port = mpi.ssh_port if mpi else "the ssh port"
        head = f"stage {stage.name}: "
        return NOT_STARTING, head + fit(
            f"MPI worker {name} runs but is not ready: nothing answers on port {port}, so "
            "the MPI Operator does not create the launcher",
            f"check spec.stages[{index}].mpi.sshdCommand and sshPort against the image "
            "(docs/mpi.md)", MESSAGE_CHARS - len(head))
    return None


# The events that carry a refused pod create, by reason, and the words before the API
# server's: the Job controller's (k8s.io/kubernetes pkg/controller/controller_utils.go)
# and the MPI Operator's (github.com/kubeflow/mpi-operator pkg/controller).
JOB_REFUSED, MPI_REFUSED = refusals.FAILED_CREATE, "MPIJobFailed"
_LAUNCHER_REFUSED = "launcher pod created failed: "  # the launcher Job, not its pod
REFUSAL_EVENTS = {JOB_REFUSED: ("Error creating: ",),
                  MPI_REFUSED: ("worker pod created failed: ", _LAUNCHER_REFUSED)}


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
        return WAITING_FOR_NODES, fit(found.text(), (
            f"nodes may still be launching, else check spec.stages[{index}].resources "
            "and its pool's nodes"), room)
    fix = (f"check {image_field(stage, index, found.container)}" if found.image
           else f"kubectl describe pod {found.pod}")
    return NOT_STARTING, fit(found.text(), fix, room)


def fit(said: str, fix: str, room: int) -> str:
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


def stall_head(stage: Stage) -> str:
    """How a stalled stage's line begins, whichever read said why (this module's,
    unmounted.py's, unlaunched.py's)."""
    return f"stage {stage.name}: its pods do not start: "


def some_head(stage: Stage) -> str:
    """How the line of a stage whose other pods run begins (SOME_NOT_STARTING)."""
    return f"stage {stage.name}: some of its pods do not start while others run: "


def summary(stage: Stage, index: int, pods: Sequence[Mapping[str, Any]]
            ) -> tuple[str, str] | None:
    """The stage's one line: the first pod that says why. No counts or durations in it:
    the same state must give the same status, or every pass would write one."""
    head = stall_head(stage)
    for pod in pods:
        found = why(pod, stage, index, MESSAGE_CHARS - len(head))
        if found:
            reason, message = found
            return reason, head + message
    return None


def some_summary(stage: Stage, index: int, pods: Sequence[Mapping[str, Any]]
                 ) -> tuple[str, str] | None:
    """The line of a stage whose other pods run: the first Pending pod that cannot
    start (an image, a container's config), or None. A pod no node takes is left out:
    a stage may have more pods than its pool has room for, and Karpenter may be
    launching the rest."""
    head = some_head(stage)
    for pod in pods:
        found = why(pod, stage, index, MESSAGE_CHARS - len(head))
        if found is not None and found[0] == NOT_STARTING:
            return SOME_NOT_STARTING, head + found[1]
    return None


@dataclass
class Stall:
    """One Job's stall as the loop remembers it between passes (monotonic seconds)."""

    since: float
    # What is read: "pods" (Pending ones), "events" (refusals; "more": while some pods
    # run, a full quota's, then a page of Pending pods), "mpi" (pods, then events),
    # "gang" (the MPIJob's events, then its Running workers), "launcher" (pods, then the
    # launcher Job's events): to_read
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
