"""Pure decisions for `rerun-failed`, `suspend`, `resume` and `cancel`.

Each takes the run as read and returns the spec merge patch to send (None: nothing to
do) with what to tell the person, or raises OpRefusedError saying why not and what to do.
The CRD's CEL rules guard the same things (rerunFailed only grows, cancel is one-way);
checking here first gives a clearer message and writes nothing needless.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nightshift.api import conditions as cond
from nightshift.pipelinerun.spec import TERMINAL_PHASES
from nightshift.pipelinerun.validity import INVALID_REASONS


class OpRefusedError(Exception):
    """The change makes no sense for this run; the message says why and what instead."""


@dataclass(frozen=True)
class Change:
    spec: dict[str, Any] | None  # fields of .spec to merge-patch; None: nothing to send
    message: str


def _parts(run: Mapping[str, Any]) -> tuple[str, Mapping[str, Any], Mapping[str, Any], str]:
    name = str((run.get("metadata") or {}).get("name"))
    spec = run.get("spec") or {}
    status = run.get("status") or {}
    return name, spec, status, str(status.get("phase") or "Pending")


def rerun_failed(run: Mapping[str, Any]) -> Change:
    name, spec, status, phase = _parts(run)
    if spec.get("cancel"):
        raise OpRefusedError(f"run {name} is cancelled, which is final; create a new run")
    invalid = cond.find(status.get("conditions"), cond.INVALID) or {}
    if invalid.get("status") == cond.TRUE and invalid.get("reason") in INVALID_REASONS:
        # The operator never acts on a rerun of an Invalid run: its finding stands.
        raise OpRefusedError(
            f"run {name} is Invalid ({str(invalid.get('message') or '')[:300]}): a rerun "
            "cannot resume it; fix the spec or its items and create a new run")
    requested = int(spec.get("rerunFailed") or 0)
    handled = int(status.get("rerunFailed") or 0)
    if requested > handled:
        return Change(None, f"a rerun is already requested (spec.rerunFailed={requested}, "
                            f"last acted upon {handled}); it starts when the run finishes")
    stages = status.get("stages") or []
    if phase == "Succeeded" and stages and all(
            int(s.get("succeeded") or 0) >= int(s.get("total") or 0) for s in stages):
        return Change(None, f"run {name}: every item succeeded; nothing to rerun")
    when = ("now" if phase in TERMINAL_PHASES
            else f"when the run finishes (it is {phase} now)")
    return Change({"rerunFailed": requested + 1},
                  f"run {name}: rerun {requested + 1} requested; each stage with failed or "
                  f"never-run items gets a new attempt {when}")


def suspend(run: Mapping[str, Any]) -> Change:
    name, spec, _, phase = _parts(run)
    if spec.get("cancel"):
        raise OpRefusedError(f"run {name} is cancelled; there is nothing to suspend")
    if phase in TERMINAL_PHASES:
        raise OpRefusedError(f"run {name} is {phase}; there is nothing to suspend")
    if spec.get("suspend"):
        return Change(None, f"run {name} is already suspended (spec.suspend=true)")
    return Change({"suspend": True}, f"run {name}: suspending; running items are stopped "
                                     "and run again on resume")


def resume(run: Mapping[str, Any]) -> Change:
    name, spec, _, _ = _parts(run)
    if spec.get("cancel"):
        raise OpRefusedError(f"run {name} is cancelled, which is final; create a new run")
    if not spec.get("suspend"):
        return Change(None, f"run {name} is not suspended (spec.suspend is not true)")
    return Change({"suspend": False}, f"run {name}: resuming")


def cancel(run: Mapping[str, Any]) -> Change:
    name, spec, _, phase = _parts(run)
    if spec.get("cancel"):
        return Change(None, f"run {name} is already cancelled")
    if phase == "Succeeded":
        raise OpRefusedError(f"run {name} already succeeded; there is nothing to cancel")
    return Change({"cancel": True}, f"run {name}: cancelled; its Jobs are stopped for good "
                                    "and kept as the record")


def merge_patch(run: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The body to send: the spec fields, guarded by the resourceVersion that was read
    so a change made in between (409) is re-read and decided again, not overwritten."""
    rv = (run.get("metadata") or {}).get("resourceVersion")
    body: dict[str, Any] = {"spec": dict(spec)}
    if rv:
        body["metadata"] = {"resourceVersion": rv}
    return body
