"""A problem found in a spec: where (the field path) and what to do about it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def summarize(problems: Sequence[Problem], limit: int = 5) -> str:
    """One condition message: the first few problems, then a count of the rest."""
    text = "; ".join(str(p) for p in problems[:limit])
    if len(problems) > limit:
        text += f"; and {len(problems) - limit} more"
    return text
