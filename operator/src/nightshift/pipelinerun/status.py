"""The PipelineRun status: a few KB whatever the item count, and events on transitions.

Sizes are capped here (failed-item ranges, samples, messages, attempts) so that a
run of 100,000 items with every other item failing still writes under 16 KB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.api import conditions as cond
from nightshift.api import ranges
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.samples import MESSAGE_LIMIT as SAMPLE_MESSAGE_LIMIT
from nightshift.pipelinerun.stalled import STOPPED, run_message

StageRecord = dict[str, Any]
FAILED_ITEMS_CHARS = 512
# The record of succeeded items (what a Job lost mid-run need not run again). Normally
# a few ranges: "0-41234" plus gaps for items in flight or failed. What does not fit
# is left out and would run again, never the other way round (progress.record_ranges).
SUCCEEDED_ITEMS_CHARS = 2048
ATTEMPT_FAILED_ITEMS_CHARS = 128
MAX_SAMPLES = 3
MESSAGE_CHARS = 200
MAX_ATTEMPT_RECORDS = 5
CONDITION_MESSAGE_CHARS = 1024
# The Invalid condition's reason (status False) for a run that checks added since its
# start would refuse: it goes on (Problem.ratchet).
STARTED_BEFORE_CHECK = "StartedBeforeCheck"


def stage_record(
    name: str,
    view: pg.StageView,
    old: Mapping[str, Any],
    samples: Sequence[Mapping[str, Any]],
    now: str,
    *,
    cancelled: bool,
) -> StageRecord:
    latest = view.latest
    if view.recorded is not None and latest is not None and latest.record is not None:
        return dict(old)  # finished, and its Jobs are gone: the record stands
    phase = latest.state if latest else pg.PENDING
    if phase == pg.LOST:
        phase = pg.RUNNING  # a replacement Job takes over (plan.py)
    if cancelled and phase in (pg.RUNNING, pg.SUSPENDED, pg.PENDING):
        phase = pg.CANCELLED
    rec: StageRecord = {"name": name, "phase": phase}
    if view.total:
        rec["total"] = view.total
    if latest is None:
        return rec
    failed_text, cut = ranges.truncate(ranges.compress(view.failed), FAILED_ITEMS_CHARS)
    old_attempts = {a.get("attempt"): a for a in old.get("attempts") or []}
    # Attempts whose Jobs are gone keep their entries; the others are recomputed.
    by_attempt: dict[int, dict[str, Any]] = {
        int(a["attempt"]): dict(a) for a in old.get("attempts") or []
        if isinstance(a.get("attempt"), int) and a["attempt"] < latest.attempt}
    for av in view.attempts:
        by_attempt[av.attempt] = _attempt_entry(av, old_attempts.get(av.attempt) or {}, now)
    attempts = [by_attempt[k] for k in sorted(by_attempt)]
    if len(attempts) > MAX_ATTEMPT_RECORDS:
        # The first attempt's record and the latest ones say the most.
        attempts = attempts[:1] + attempts[-(MAX_ATTEMPT_RECORDS - 1):]
    rec.update({
        "attempt": latest.attempt,
        "jobName": latest.name,
        "succeeded": len(view.succeeded),
        "failed": len(view.failed),
        "running": latest.active,
        "ready": latest.ready,
        "startTime": attempts[0]["startTime"],
    })
    if latest.parallelism is not None:
        rec["parallelism"] = latest.parallelism
    done_text, done_cut = pg.record_ranges(view.succeeded, SUCCEEDED_ITEMS_CHARS)
    if done_text:
        rec["succeededItems"] = done_text
    if done_cut:
        rec["succeededItemsTruncated"] = True
    if failed_text:
        rec["failedItems"] = failed_text
    if cut:
        rec["failedItemsTruncated"] = True
    picked = _samples(view, samples) or list(old.get("failureSamples") or [])
    if picked and view.failed:
        rec["failureSamples"] = picked[:MAX_SAMPLES]
    if phase in (pg.SUCCEEDED, pg.FAILED):
        rec["completionTime"] = attempts[-1].get("completionTime", now)
    if latest.reason:
        rec["reason"] = latest.reason
        rec["message"] = latest.message[:MESSAGE_CHARS]
    rec["attempts"] = attempts
    return rec


def _attempt_entry(av: pg.AttemptView, prior: Mapping[str, Any], now: str) -> dict[str, Any]:
    if av.record is not None:
        # The Job is gone: its last recorded counts stand, and why it ended.
        kept = dict(av.record)
        if av.state == pg.LOST:
            kept["reason"] = "JobLost"
            kept.setdefault("completionTime", now)
        return kept
    a_failed, _ = ranges.truncate(ranges.compress(av.failed), ATTEMPT_FAILED_ITEMS_CHARS)
    entry: dict[str, Any] = {
        "attempt": av.attempt,
        "jobName": av.name,
        "items": av.completions,
        "succeeded": len(av.succeeded),
        "failed": len(av.failed),
        "startTime": prior.get("startTime") or av.creation_time or now,
    }
    uid = av.uid or prior.get("jobUID")
    if uid:
        # Seen once: if it disappears before its stage finishes, it was lost.
        entry["jobUID"] = uid
    if a_failed:
        entry["failedItems"] = a_failed
    if av.state in (pg.SUCCEEDED, pg.FAILED):
        entry["completionTime"] = prior.get("completionTime") or av.completion_time or now
    if av.reason:
        entry["reason"] = av.reason
    return entry


def _samples(view: pg.StageView, samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    by_attempt = {a.attempt: a for a in view.attempts}
    by_job = {a.name: a for a in view.attempts}
    for s in samples[:MAX_SAMPLES]:
        idx = int(s.get("index", -1))
        # The sample's index is local to its Job; retry Jobs map it back to the item.
        av = by_job.get(str(s.get("job"))) or by_attempt.get(int(s.get("attempt") or 0))
        if av is not None and av.batch > 1 and idx >= 0:
            # A batch's pod: its first item stands for it (the pod's log says which).
            idx *= av.batch
        if av is not None and av.indexes is not None:
            idx = av.indexes[idx] if 0 <= idx < len(av.indexes) else -1
        entry: dict[str, Any] = {"index": idx}
        if s.get("item") is not None:
            entry["item"] = str(s["item"])[:MESSAGE_CHARS]
        if s.get("exitCode") is not None:
            entry["exitCode"] = int(s["exitCode"])
        if s.get("reason"):
            entry["reason"] = str(s["reason"])[:MESSAGE_CHARS]
        if s.get("message"):
            # Already cut to its end (samples.message_tail): cutting its head here
            # would drop the last words, which say why.
            entry["message"] = str(s["message"])[:SAMPLE_MESSAGE_LIMIT]
        out.append(entry)
    return out


def run_phase(records: Sequence[StageRecord], invalid: bool, suspend: bool, cancel: bool,
              old_phase: str | None) -> str:
    phases = [r["phase"] for r in records]
    running = any(p in (pg.RUNNING, pg.SUSPENDED) for p in phases)
    # Found invalid once started (an operator that no longer allows its runner image, a
    # Job the API server refuses): nothing new starts, the running Jobs go on to their
    # end, then the run is Failed, as with a failed stage.
    if invalid and not running:
        return "Failed"
    if phases and all(p == pg.SUCCEEDED for p in phases):
        return "Succeeded"
    if cancel or old_phase == "Cancelled":
        return "Cancelled"
    # A failed stage starts no new stage, but the ones running go on to their end (and
    # cost): the run is Failed, with its completionTime, only once none runs.
    if pg.FAILED in phases and not running:
        return "Failed"
    if suspend:
        return "Suspended"
    if running:
        return "Running"
    return "Pending"


def build_status(
    *,
    old: Mapping[str, Any],
    records: list[StageRecord],
    problems: list[str],
    generation: int,
    now: str,
    rerun_handled: int,
    suspend: bool,
    cancel: bool,
    resolving: bool,
    final: bool = False,
    waiting: str = "",
    waiting_reason: str = "WaitingForStorage",
    stalled: Sequence[tuple[str, str]] = (),
    invalid_reason: str = "ValidationFailed",
    ending: str = "",
    waived: str = "",
) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """The run's status and the events of its transitions.

    `final`: the run had finished (Succeeded, Failed, Cancelled) and nothing runs again;
    its phase, times and conditions stay as they were, whatever happened to its Jobs.
    `waiting`: why stages cannot start yet (SharedStorages, a VirtualCluster or its
    pools that do not exist), or ""; `waiting_reason` the Progressing reason it gives.
    `stalled`: (reason, message) of each running stage whose pods do not start.
    `invalid_reason`: the Invalid condition's reason when `problems` are given:
    ValidationFailed (the spec, a refusal) or InvalidItems (a stage's resolved items).
    `ending`: what a Failing or Invalid run's end waits for beside its running Jobs (a
    lost Job's pods), said in its Progressing message.
    `waived`: what checks added since the run started find in its spec (Problem.ratchet):
    said in the Invalid condition (False, reason StartedBeforeCheck), once as an event.
    """
    old_phase = old.get("phase")
    phase = (str(old_phase) if final
             else run_phase(records, bool(problems), suspend, cancel, old_phase))
    total = sum(int(r.get("total", 0)) for r in records)
    succeeded = sum(int(r.get("succeeded", 0)) for r in records)
    failed = sum(int(r.get("failed", 0)) for r in records)
    status: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": generation,
        "progress": f"{succeeded}/{total}",
        "total": total,
        "succeeded": succeeded,
        "failed": failed,
        "rerunFailed": rerun_handled,
        "stages": records,
    }
    if "cost" in old:
        status["cost"] = old["cost"]  # written by the cost reporter, kept as is
    starts = [r["startTime"] for r in records if r.get("startTime")]
    if starts:
        status["startTime"] = min(starts)
    if phase in ("Succeeded", "Failed", "Cancelled"):
        status["completionTime"] = (old.get("completionTime") if old_phase == phase
                                    else None) or now
    if final and old.get("conditions"):
        status["conditions"] = [dict(c) for c in old["conditions"]]
    else:
        status["conditions"] = cond.merge(
            old.get("conditions"),
            _conditions(phase, records, problems, generation, resolving, waiting,
                        waiting_reason, stalled, invalid_reason, ending, waived), now)
    return status, ([] if final else
                    _events(old, records, phase, problems, invalid_reason, waived))


def _failed_reason(invalid_reason: str) -> str:
    """The Failed condition's and the event's reason for an invalid run."""
    return "Invalid" if invalid_reason == "ValidationFailed" else invalid_reason


def _conditions(phase: str, records: list[StageRecord], problems: list[str],
                generation: int, resolving: bool, waiting: str = "",
                waiting_reason: str = "WaitingForStorage",
                stalled: Sequence[tuple[str, str]] = (),
                invalid_reason: str = "ValidationFailed",
                ending: str = "", waived: str = "") -> list[dict[str, Any]]:
    g = generation
    failed_stages = [r for r in records if r["phase"] == pg.FAILED]
    if problems:
        text = "; ".join(problems)[:CONDITION_MESSAGE_CHARS]
        invalid = cond.condition(cond.INVALID, cond.TRUE, invalid_reason, text, g)
        failed = (cond.condition(cond.FAILED, cond.TRUE, _failed_reason(invalid_reason),
                                 text, g)
                  if phase == "Failed" else
                  cond.condition(cond.FAILED, cond.FALSE, "NoFailure", "", g))
    else:
        invalid = (cond.condition(cond.INVALID, cond.FALSE, STARTED_BEFORE_CHECK,
                                  _waived_text(waived), g) if waived
                   else cond.condition(cond.INVALID, cond.FALSE, "Valid", "", g))
        if phase == "Failed" and failed_stages:
            text = "; ".join(_failure_text(r) for r in failed_stages)[:CONDITION_MESSAGE_CHARS]
            failed = cond.condition(cond.FAILED, cond.TRUE, "StageFailed", text, g)
        else:
            failed = cond.condition(cond.FAILED, cond.FALSE, "NoFailure", "", g)
    if phase == "Succeeded":
        n = sum(int(r.get("failed", 0)) for r in records)
        msg = "all stages succeeded" + (f" ({n} failed items tolerated)" if n else "")
        ready = cond.condition(cond.READY, cond.TRUE, "Succeeded", msg, g)
    else:
        ready = cond.condition(cond.READY, cond.FALSE, phase, f"run is {phase}", g)
    moving = phase in ("Running", "Pending")
    reason = "ResolvingItems" if resolving and phase == "Pending" else phase
    progressing = cond.condition(cond.PROGRESSING, cond.TRUE if moving else cond.FALSE,
                                 reason, f"run is {phase}", g)
    if (problems or failed_stages) and phase in ("Running", "Suspended"):
        running = [r["name"] for r in records if r["phase"] in (pg.RUNNING, pg.SUSPENDED)]
        one = len(running) == 1
        text = "; ".join(problems or [_failure_text(r) for r in failed_stages])
        # Suspended Jobs never end by themselves: say what lets them.
        held = phase == "Suspended"
        how = ("suspended: set spec.suspend false to let them end, or spec.cancel" if held
               else f"spec.cancel stops {'it' if one else 'them'} now")
        progressing = cond.condition(
            cond.PROGRESSING, cond.FALSE if held else cond.TRUE,
            "Invalid" if problems else "Failing",
            (f"{text}; no new stage starts, and the run is Failed once {', '.join(running)} "
             f"end{'s' if one else ''} ({how})" + (f"; {ending}" if ending else "")
             )[:CONDITION_MESSAGE_CHARS], g)
    elif waiting and moving:
        progressing = cond.condition(
            cond.PROGRESSING, cond.FALSE if phase == "Pending" else cond.TRUE,
            waiting_reason, waiting[:CONDITION_MESSAGE_CHARS], g)
    elif stalled and phase == "Running":
        # Pods that cannot start (an image, a container's config) or be created (a
        # LimitRange, Pod Security) make no progress; pods waiting for a node or for
        # quota may get one (Karpenter launching, other runs ending): still progressing.
        reasons = [r for r, _ in stalled]
        reason = next((r for r in reasons if r in STOPPED), reasons[0])
        text = run_message(stalled, CONDITION_MESSAGE_CHARS)
        progressing = cond.condition(
            cond.PROGRESSING, cond.FALSE if reason in STOPPED else cond.TRUE,
            reason, text, g)
    return [ready, progressing, failed, invalid]


# What to change for the failures a stage's own fields cause, beside the Job's reason or
# a failed pod's (the kubelet's OOMKilled).
FAILURE_FIXES = {
    "DeadlineExceeded": "it ran longer than its activeDeadlineSeconds: spec.rerunFailed runs "
                        "its unfinished items again, with a fresh deadline; for a longer "
                        "one, or none, create a new run (stages are immutable)",
    "OOMKilled": "its pods were killed for memory (OOMKilled): create a new run with a "
                 "higher resources.limits.memory for this stage (stages are immutable)",
}


def _failure_text(r: StageRecord) -> str:
    text = f"stage {r['name']}: {r.get('reason') or 'failed'}"
    if r.get("failedItems"):
        text += f", {r.get('failed', 0)} failed items ({r['failedItems']})"
    seen = [r.get("reason"), *(s.get("reason") for s in r.get("failureSamples") or [])]
    fixes = [FAILURE_FIXES[k] for k in FAILURE_FIXES if k in seen]
    return "; ".join([text, *fixes])


def _waived_text(waived: str) -> str:
    tail = ("; checks added since this run started: it goes on as before, and a new run "
            "with this spec is refused")
    return waived[:CONDITION_MESSAGE_CHARS - len(tail)] + tail


def _events(old: Mapping[str, Any], records: list[StageRecord], phase: str,
            problems: list[str], invalid_reason: str,
            waived: str = "") -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []
    said = cond.find(old.get("conditions"), cond.INVALID) or {}
    if waived and not problems and said.get("reason") != STARTED_BEFORE_CHECK:
        # Said once, and only where the condition says it: an Invalid run says Invalid.
        events.append(("Warning", STARTED_BEFORE_CHECK, _waived_text(waived)))
    prior = {s.get("name"): s for s in old.get("stages") or []}
    for r in records:
        before = prior.get(r["name"]) or {}
        if r.get("waiting") and not before.get("waiting"):
            events.append(("Warning", "StagePodsWaiting", str(r["waiting"])))
        if before.get("phase") == r["phase"] and before.get("attempt") == r.get("attempt"):
            continue
        if r["phase"] == pg.RUNNING:
            attempt = int(r.get("attempt", 0))
            reason = "RetryStarted" if attempt else "StageStarted"
            events.append(("Normal", reason, f"stage {r['name']} attempt {attempt} started "
                           f"({r.get('total', 0)} items, job {r.get('jobName')})"))
        elif r["phase"] == pg.SUCCEEDED:
            events.append(("Normal", "StageSucceeded", f"stage {r['name']} succeeded: "
                           f"{r.get('succeeded', 0)}/{r.get('total', 0)} items"))
        elif r["phase"] == pg.FAILED:
            events.append(("Warning", "StageFailed", _failure_text(r)))
    old_phase = old.get("phase")
    was_invalid = (cond.find(old.get("conditions"), cond.INVALID) or {}).get(
        "status") == cond.TRUE
    # Said once when found, mid-run too (the phase stays Running until its Jobs end);
    # for a run that never started it is the only event (no RunFailed beside it).
    found = bool(problems) and not was_invalid
    if found:
        events.append(("Warning", _failed_reason(invalid_reason),
                       "; ".join(problems)[:CONDITION_MESSAGE_CHARS]))
    if old_phase != phase and not (found and old_phase in (None, "Pending")):
        if phase == "Running" and old_phase == "Suspended":
            events.append(("Normal", "RunResumed", "run resumed"))
        elif phase in ("Succeeded", "Failed", "Cancelled", "Suspended"):
            kind = "Warning" if phase == "Failed" else "Normal"
            events.append((kind, f"Run{phase}", f"run is {phase}"))
    return events


def unresolved_status(old: Mapping[str, Any], status: dict[str, Any],
                      unresolved: Mapping[str, str], generation: int,
                      now: str, reason: str = "ItemsUnresolved"
                      ) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """The status of a pass whose stages' items could not be resolved yet, and its events.

    `unresolved`: stage -> why. The stage waits (Progressing=False, ItemsUnresolved) in
    the phase the others give the run: a pass with such a stage still starts and changes
    the others (plan.py). Items that can never resolve are a problem of the run instead
    (InvalidItems, plan.py). One Warning event per stage when its message is new.
    """
    old_conds = old.get("conditions") or []
    conds = list(status.get("conditions") or [])
    events = []
    for stage, why in unresolved.items():
        message = f"stage {stage}: {why}"
        new = cond.condition(cond.PROGRESSING, cond.FALSE, reason, message, generation)
        conds = [*(c for c in conds if c["type"] != new["type"]),
                 *cond.merge(old_conds, [new], now=now)]
        prior = cond.find(old_conds, new["type"])
        if prior is None or prior.get("message") != message:
            events.append(("Warning", str(new["reason"]), message))
    status["conditions"] = conds
    return status, events
