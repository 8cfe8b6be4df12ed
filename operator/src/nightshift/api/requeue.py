"""When a kind's loop should look again: planners and reconcile passes each find
reasons to come back sooner than the resync, and keep the earliest."""

from __future__ import annotations


def sooner(a: float | None, b: float | None) -> float | None:
    """The earlier of two requeue delays, None meaning "only the resync"."""
    if a is None:
        return b
    return a if b is None else min(a, b)
