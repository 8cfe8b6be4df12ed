"""What makes a run Invalid this pass, from the problems the checks found (pure).

An earlier pass's finding stands (a refusal or invalid items are seen only in the pass
that met them), and a check added after the run started is waived for it
(Problem.ratchet): the run goes on, and its status says what a new run would meet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nightshift.api import conditions as cond
from nightshift.api.problems import Problem

# The Invalid condition's reasons that stand until the run ends (status.py writes them).
INVALID_REASONS = ("ValidationFailed", "InvalidItems")


@dataclass(frozen=True)
class Validity:
    problems: list[Problem]
    # An earlier pass's Invalid message, still standing (problems it already names are
    # not in `problems`).
    carried: list[str] = field(default_factory=list)
    # What checks added since the run started find: said, not acted on.
    waived: list[Problem] = field(default_factory=list)
    # The Invalid condition's reason: ValidationFailed (the spec, a refusal, the runner
    # image) or InvalidItems (a stage's resolved items).
    reason: str = "ValidationFailed"

    @property
    def invalid(self) -> bool:
        return bool(self.problems or self.carried)


def judge(old_status: Mapping[str, Any], problems: Sequence[Problem],
          bad_items: Sequence[Problem], *, started: bool) -> Validity:
    """`bad_items`: those of `problems` that are a stage's resolved items; `started`: the
    run has a stage Job or a start time."""
    waived = [p for p in problems if p.ratchet] if started else []
    kept = [p for p in problems if not (started and p.ratchet)]
    said = cond.find(old_status.get("conditions"), cond.INVALID) or {}
    carried: list[str] = []
    if said.get("status") == cond.TRUE and said.get("reason") in INVALID_REASONS:
        # It stands, so a refused write is not retried, nor the items resolved again,
        # even for a rerunFailed request (a new run is needed); problems found since
        # are added to it.
        message = str(said.get("message") or "")
        carried = [message]
        kept = [p for p in kept if str(p) not in message]
    reason = "ValidationFailed"
    if ((kept or carried) and all(p in bad_items for p in kept)
            and (not carried or said.get("reason") == "InvalidItems")):
        reason = "InvalidItems"
    return Validity(kept, carried, waived, reason)
