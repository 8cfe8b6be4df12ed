"""The plan of a kind that owns a finalizer (VirtualCluster, SharedStorage): the fields
the engine's pass carries out in its safe order (engine/passes.py). Each kind's Plan
adds what only it does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nightshift.api.events import Event


@dataclass(frozen=True)
class OwnedPlan:
    add_finalizer: bool = False
    remove_finalizer: bool = False
    apply: list[dict[str, Any]] = field(default_factory=list)
    # References ({apiVersion, kind, name[, namespace]}) of our objects to delete, in the
    # order given.
    prune: list[dict[str, str]] = field(default_factory=list)
    status: dict[str, Any] | None = None
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    # Nothing left to do for this object: its loop ends.
    gone: bool = False
