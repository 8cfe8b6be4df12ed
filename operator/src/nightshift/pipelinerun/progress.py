"""A stage's progress, derived only from its Jobs' status (never from pods or memory).

Attempt 0 runs every item; attempt k > 0 (a rerunFailed retry) runs exactly the
items attempt k-1 left unfinished, in ascending original index. That rule alone
lets any pass rebuild which original item each retry completion index stands for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nightshift.api import ranges

RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
PENDING = "Pending"
CANCELLED = "Cancelled"


@dataclass
class AttemptView:
    attempt: int
    name: str
    completions: int
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


@dataclass
class StageView:
    total: int
    attempts: list[AttemptView] = field(default_factory=list)
    succeeded: set[int] = field(default_factory=set)

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


def job_condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return c  # type: ignore[no-any-return]
    return None


def stage_view(
    jobs: Mapping[int, Mapping[str, Any]], total: int, tolerate: int | None
) -> StageView:
    """Fold a stage's attempt Jobs (attempt -> Job) into original-index progress."""
    view = StageView(total=total)
    mapping: list[int] | None = None  # None: identity, as for attempt 0
    attempt = 0
    while attempt in jobs:
        job = jobs[attempt]
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        completions = int(spec.get("completions") or 0)
        if mapping is None and attempt == 0 and not total:
            view.total = total = completions
        done = _originals(ranges.parse(status.get("completedIndexes")), mapping)
        failed = _originals(ranges.parse(status.get("failedIndexes")), mapping)
        view.succeeded |= done
        mine = range(total) if mapping is None else mapping
        unfinished = [i for i in mine if i not in done and i not in failed]
        av = AttemptView(
            attempt=attempt,
            name=(job.get("metadata") or {}).get("name", ""),
            completions=completions,
            succeeded=done,
            failed=failed,
            unfinished=unfinished,
            active=int(status.get("active") or 0),
            ready=int(status.get("ready") or 0),
            state=RUNNING,
            creation_time=(job.get("metadata") or {}).get("creationTimestamp"),
            parallelism=spec.get("parallelism"),
            suspended=bool(spec.get("suspend")),
            indexes=mapping,
        )
        _finish_state(av, job, view, tolerate)
        view.attempts.append(av)
        mapping = [i for i in mine if i not in done]
        attempt += 1
    return view


def _originals(local: list[int], mapping: list[int] | None) -> set[int]:
    if mapping is None:
        return set(local)
    return {mapping[i] for i in local if i < len(mapping)}


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
