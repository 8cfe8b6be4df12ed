"""Kubernetes Events a planner asks for: on transitions only, never per pass."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightshift.api import conditions


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


def condition_events(old: Sequence[Mapping[str, Any]] | None,
                     new: Sequence[Mapping[str, Any]] | None) -> list[Event]:
    """One event per condition whose status changed. Warnings for Ready=False and for
    Invalid, CapacityLimited or ReconcileError becoming True."""
    out = []
    for c in new or []:
        prior = conditions.find(old, c["type"])
        if prior is not None and prior.get("status") == c["status"]:
            continue
        # A fresh object's "all is well" False conditions are not news.
        if prior is None and c["status"] == conditions.FALSE and c["type"] in (
                conditions.INVALID, conditions.CAPACITY_LIMITED):
            continue
        type_, status = str(c["type"]), str(c["status"])
        warning = (type_ == conditions.READY and status == conditions.FALSE) or (
            type_ in (conditions.INVALID, conditions.CAPACITY_LIMITED,
                      conditions.RECONCILE_ERROR) and status == conditions.TRUE)
        message = str(c.get("message", ""))
        out.append(Event("Warning" if warning else "Normal", str(c.get("reason", "")),
                         f"{type_}={status}: {message}" if message else f"{type_}={status}"))
    return out
