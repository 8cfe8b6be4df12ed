"""A stage's progress, derived from its Jobs' status and the run's own record of it.

Attempt 0 runs every item; attempt k > 0 (a rerunFailed retry, or the replacement of
a Job lost mid-run) runs the items not known to have succeeded when it was created, in
ascending original index. Such a Job carries that set (names.ANNOTATION_SKIP_ITEMS), so
it maps its completion indexes back to items by itself, even after earlier attempts'
Jobs are gone; older Jobs without it are mapped by the rule alone (attempt k runs what
attempt k-1 left unfinished).

The status is the record: which items succeeded (`succeededItems`) and which Job each
attempt was. A stage whose Jobs disappear (by hand, a TTL, a clean-up of finished Jobs)
keeps what the record says; a Job seen once and then gone while its stage ran is Lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nightshift.api import names, ranges
from nightshift.pipelinerun import batch as batchmod

RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
PENDING = "Pending"
CANCELLED = "Cancelled"
# The attempt's Job was seen, then disappeared before its stage finished.
LOST = "Lost"


@dataclass
class AttemptView:
    attempt: int
    name: str
    completions: int  # items (positions), not pods: a batched Job has fewer completions
    succeeded: set[int]  # original indexes
    failed: set[int]  # original indexes
    unfinished: list[int]  # original indexes neither succeeded nor failed here
    active: int
    ready: int
    state: str
    reason: str = ""
    message: str = ""
    completion_time: str | None = None
    creation_time: str | None = None
    parallelism: int | None = None
    suspended: bool = False
    # Original index of each completion index; None for attempt 0 (the identity).
    indexes: list[int] | None = None
    uid: str | None = None
    # The attempt's status entry, when its Job is gone and the entry is all there is.
    record: Mapping[str, Any] | None = None
    # Items per completion index (stages[].batch).
    batch: int = 1


@dataclass
class StageView:
    total: int
    attempts: list[AttemptView] = field(default_factory=list)
    succeeded: set[int] = field(default_factory=set)
    # The stage finished and its latest Job is gone: this status entry is its record.
    recorded: Mapping[str, Any] | None = None
    # A recorded attempt whose Job was never seen (created, not visible yet, or deleted
    # before any pass saw it): nothing of it is recorded, so it is applied again as is.
    unseen: int | None = None

    @property
    def latest(self) -> AttemptView | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def not_succeeded(self) -> list[int]:
        return [i for i in range(self.total) if i not in self.succeeded]

    @property
    def failed(self) -> set[int]:
        # Items failed in earlier attempts are being retried, so only the latest counts.
        return self.latest.failed if self.latest else set()


# The Job conditions that end a stage's attempt here (_finish_state): the Job controller
# sets SuccessCriteriaMet as soon as every item succeeded and Complete once its pods'
# finalizers are gone; FailureTarget is not counted, Failed is.
ENDING = ("SuccessCriteriaMet", "Complete", "Failed")


def ended(job: Mapping[str, Any]) -> bool:
    return any(job_condition(job, t) for t in ENDING)


def job_condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return c  # type: ignore[no-any-return]
    return None


def record_ranges(indexes: Iterable[int], limit: int) -> tuple[str, bool]:
    """`indexes` as ranges of at most `limit` characters, and whether any were left out.

    What does not fit is left out, never added: a record may say fewer items succeeded
    than did (they run again), never more. The longest ranges are kept first, so the
    characters cover as many items as they can.
    """
    text = ranges.compress(indexes)
    if len(text) <= limit:
        return text, False
    spans = sorted(ranges.spans(text), key=lambda s: (s[0] - s[1], s[0]))
    kept: list[tuple[int, int]] = []
    used = -1
    for lo, hi in spans:
        n = len(ranges.span(lo, hi)) + 1
        if used + n <= limit:
            kept.append((lo, hi))
            used += n
    return ",".join(ranges.span(lo, hi) for lo, hi in sorted(kept)), True


def _parse(text: Any) -> set[int]:
    try:
        return set(ranges.parse(str(text or "")))
    except ValueError:
        return set()  # a damaged record claims nothing


def _skip_mapping(job: Mapping[str, Any], total: int,
                  maps: Mapping[str, Sequence[int]]) -> list[int] | None:
    """A retry or replacement Job's own map, from the items it was created to skip, or
    read from its indexes ConfigMaps (`maps`, by Job name: none read, nothing counted)."""
    meta = job.get("metadata") or {}
    ann = meta.get("annotations") or {}
    if names.ANNOTATION_INDEXES_CONFIGMAPS in ann:
        return [i for i in maps.get(str(meta.get("name")), ()) if i < total]
    if names.ANNOTATION_SKIP_ITEMS not in ann:
        return None
    try:
        skip = set(ranges.parse(ann[names.ANNOTATION_SKIP_ITEMS]))
    except ValueError:
        return []  # not ours to trust: count nothing of this Job
    return [i for i in range(total) if i not in skip]


def stage_view(
    jobs: Mapping[int, Mapping[str, Any]], total: int, tolerate: int | None,
    record: Mapping[str, Any] | None = None, batch: int = 1,
    done_ranges: str = "", maps: Mapping[str, Sequence[int]] | None = None,
) -> StageView:
    """Fold a stage's attempt Jobs (attempt -> Job) and its status entry into progress.

    `batch`: the stage's items per pod; a completion index stands for its batch's
    items (pipelinerun/batch.py), so everything here counts items, not pods. `done_ranges`:
    ranges of items known to have succeeded besides the record (the stage's done set,
    doneset.py; a damaged one claims nothing).
    `maps`: the completion-index maps of retry Jobs that keep theirs in ConfigMaps.
    """
    record = record or {}
    if not total:
        total = int(record.get("total") or 0)
    view = StageView(total=total)
    if not total and 0 in jobs:
        view.total = total = batchmod.job_positions(jobs[0]) or int(
            (jobs[0].get("spec") or {}).get("completions") or 0)
    view.succeeded |= {i for i in _parse(record.get("succeededItems")) if i < total}
    view.succeeded |= {i for i in _parse(done_ranges) if i < total}
    # attempt -> (the original indexes it runs, those it completed), for the rule.
    known: dict[int, tuple[list[int], set[int]]] = {}
    for attempt in sorted(jobs):
        job = jobs[attempt]
        meta = job.get("metadata") or {}
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        mapping: list[int] | None = None
        if attempt:
            mapping = _skip_mapping(job, total, maps or {})
            if mapping is None:
                prev = known.get(attempt - 1)
                # Without the annotation and the Job before it, nothing maps this one.
                mapping = [i for i in prev[0] if i not in prev[1]] if prev else []
        mine = list(range(total)) if mapping is None else mapping
        done = _originals(ranges.parse(status.get("completedIndexes")), mapping, batch, mine)
        failed = _originals(ranges.parse(status.get("failedIndexes")), mapping, batch, mine)
        view.succeeded |= done
        av = AttemptView(
            attempt=attempt,
            name=meta.get("name", ""),
            completions=len(mine) if batch > 1 else int(spec.get("completions") or 0),
            succeeded=done,
            failed=failed,
            unfinished=[i for i in mine if i not in done and i not in failed],
            active=int(status.get("active") or 0),
            ready=int(status.get("ready") or 0),
            state=RUNNING,
            creation_time=meta.get("creationTimestamp"),
            parallelism=spec.get("parallelism"),
            suspended=bool(spec.get("suspend")),
            indexes=mapping,
            uid=meta.get("uid"),
            batch=batch,
        )
        _finish_state(av, job, view, tolerate)
        if mapping == [] and av.state == SUCCEEDED and av.completions:
            # Its map could not be read (an indexes ConfigMap deleted or not the run's):
            # nothing of it is counted, so it must not finish the stage as done either.
            _unmapped(av, meta)
        view.attempts.append(av)
        known[attempt] = (mine, done)
    _recorded_latest(view, record, max(jobs) if jobs else -1)
    return view


def _recorded_latest(view: StageView, record: Mapping[str, Any], last_seen: int) -> None:
    """The latest recorded attempt, when its Job is not among those observed."""
    if not record.get("jobName"):
        return
    try:
        attempt = int(record.get("attempt") or 0)
    except (TypeError, ValueError):
        return
    if attempt <= last_seen:
        return
    entry: Mapping[str, Any] = next(
        (a for a in record.get("attempts") or [] if a.get("attempt") == attempt), {})
    phase = record.get("phase")
    av = AttemptView(
        attempt=attempt, name=str(entry.get("jobName") or record["jobName"]),
        completions=int(entry.get("items") or 0), succeeded=set(), failed=set(),
        unfinished=[], active=0, ready=0, state=LOST,
        creation_time=entry.get("startTime"), parallelism=record.get("parallelism"),
        uid=entry.get("jobUID"), record=entry)
    if phase in (SUCCEEDED, FAILED):
        # Finished: whatever happens to its Jobs, the record stands.
        av.state = str(phase)
        av.failed = {i for i in _parse(record.get("failedItems")) if i < view.total}
        av.reason = str(record.get("reason") or "")
        av.message = str(record.get("message") or "")
        av.completion_time = entry.get("completionTime") or record.get("completionTime")
        view.recorded = record
    elif not entry.get("jobUID"):
        view.unseen = attempt
        return
    view.attempts.append(av)


def _originals(local: list[int], mapping: list[int] | None, batch: int,
               mine: list[int]) -> set[int]:
    if batch > 1:
        return batchmod.items_of(local, batch, len(mine), mine)
    if mapping is None:
        return set(local)
    return {mapping[i] for i in local if i < len(mapping)}


def _unmapped(av: AttemptView, meta: Mapping[str, Any]) -> None:
    av.state = FAILED
    av.reason = "IndexMapMissing"
    av.message = (f"Job {meta.get('name')}'s index map (its indexes ConfigMaps) is "
                  "unreadable: none of its items counts; bump spec.rerunFailed to rerun them")


def _finish_state(av: AttemptView, job: Mapping[str, Any], view: StageView,
                  tolerate: int | None) -> None:
    status = job.get("status") or {}
    ok = job_condition(job, "Complete") or job_condition(job, "SuccessCriteriaMet")
    bad = job_condition(job, "Failed")
    if ok:
        av.state = SUCCEEDED
        av.completion_time = status.get("completionTime") or ok.get("lastTransitionTime")
    elif bad:
        av.reason = str(bad.get("reason") or "")
        av.message = str(bad.get("message") or "")
        av.completion_time = bad.get("lastTransitionTime")
        left = view.total - len(view.succeeded)
        # Every item ran and the failures fit the stage's tolerance: the stage is done
        # and its dependents may start (the Job API still calls this Failed).
        tolerated = av.reason == "FailedIndexes" and tolerate is not None and left <= tolerate
        av.state = SUCCEEDED if tolerated else FAILED
    elif av.suspended:
        av.state = SUSPENDED
