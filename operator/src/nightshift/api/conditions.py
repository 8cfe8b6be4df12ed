"""Status conditions per the Kubernetes API conventions (metav1.Condition)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

READY = "Ready"
PROGRESSING = "Progressing"
FAILED = "Failed"
INVALID = "Invalid"
CAPACITY_LIMITED = "CapacityLimited"
# Set by the engine (engine/loop.py) when passes keep failing; cleared when they succeed.
RECONCILE_ERROR = "ReconcileError"

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"


RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(t: datetime) -> str:
    """A condition's or status's timestamp: seconds, UTC, `Z`."""
    return t.replace(microsecond=0).strftime(RFC3339)


def parse_rfc3339(s: str | None) -> datetime | None:
    """The API server's timestamps (seconds, `Z`) as aware UTC datetimes; None for none.
    Anything else raises ValueError."""
    return datetime.strptime(s, RFC3339).replace(tzinfo=UTC) if s else None


def now_rfc3339() -> str:
    return rfc3339(datetime.now(UTC))


def condition(
    type_: str, status: str, reason: str, message: str, observed_generation: int
) -> dict[str, Any]:
    """A condition without a transition time; `merge` fills it in."""
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": observed_generation,
    }


def merge(
    old: Iterable[Mapping[str, Any]] | None,
    new: Iterable[Mapping[str, Any]],
    now: str | None = None,
) -> list[dict[str, Any]]:
    """New conditions, keeping lastTransitionTime where a condition's status did not change.

    Keeping the old time when nothing changed makes the merged list equal to the old
    one, so a reconcile pass that observed nothing new writes nothing.
    """
    stamp = now or now_rfc3339()
    previous = {c["type"]: c for c in (old or [])}
    merged: list[dict[str, Any]] = []
    for c in new:
        prior = previous.get(c["type"])
        same = prior is not None and prior.get("status") == c["status"]
        when = prior.get("lastTransitionTime", stamp) if same and prior else stamp
        merged.append({**c, "lastTransitionTime": when})
    return merged


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for c in conditions or []:
        if c.get("type") == type_:
            return c
    return None


def false_for(conds: Iterable[Mapping[str, Any]] | None, type_: str, now: datetime) -> float:
    """Seconds the condition `type_` has been False (since its lastTransitionTime); 0
    when it is not False, or says no time."""
    c = find(conds, type_)
    try:
        since = (parse_rfc3339(c.get("lastTransitionTime"))
                 if c and c.get("status") == FALSE else None)
    except ValueError:
        return 0.0
    return max(0.0, (now - since).total_seconds()) if since else 0.0
