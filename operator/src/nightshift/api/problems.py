"""A problem found in a spec: where (the field path) and what to do about it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    # A check added after runs could already start with this problem: it refuses a new
    # run and never stops one that is going (Kubernetes ratchets its validation the same
    # way), so an operator upgrade does not fail runs mid-way.
    ratchet: bool = False

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def summarize(problems: Sequence[Problem], limit: int = 5) -> str:
    """One condition message: the first few problems, then a count of the rest."""
    text = "; ".join(str(p) for p in problems[:limit])
    if len(problems) > limit:
        text += f"; and {len(problems) - limit} more"
    return text
