"""Status writes shared by every kind: once per pass, only when changed, and the
engine's ReconcileError condition."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nightshift.api import conditions
from nightshift.kube import Kube


def without(value: Any, keys: frozenset[str]) -> Any:
    """`value` without the given keys at any depth (stages, attempts)."""
    if isinstance(value, Mapping):
        return {k: without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, keys) for v in value]
    return value


@dataclass
class StatusWriter:
    """Writes an object's status subresource when it changed.

    `progress_keys` name counters that move with every pod: a change in nothing but
    those is written at most every `progress_interval` seconds, so a 100,000-item stage
    costs a status write per interval, not per pod. Phase and condition changes are
    written at once. A change held back sets `deferred`, the seconds until it is due:
    the caller must pass again by then (`api.requeue.sooner`), or a run with no more
    events (the last pods done, a paused stage) shows old counts until the resync.
    """

    api_version: str
    kind: str
    progress_keys: frozenset[str] = frozenset()
    progress_interval: float = 0.0
    clock: Callable[[], float] = time.monotonic
    last_write: float = float("-inf")
    deferred: float | None = None

    def write(self, kube: Kube, obj: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Patch `obj`'s status to `new` if needed; True when written. The engine's own
        condition (ReconcileError) is kept: planners do not know it, and only the
        engine clears it."""
        self.deferred = None
        old = obj.get("status") or {}
        new = with_engine_conditions(old, new)
        if new == old:
            return False
        now = self.clock()
        if (self.progress_keys and without(new, self.progress_keys)
                == without(old, self.progress_keys)
                and now - self.last_write < self.progress_interval):
            self.deferred = self.progress_interval - (now - self.last_write)
            return False
        meta = obj["metadata"]
        kube.patch_status(self.api_version, self.kind, meta["name"], meta.get("namespace"),
                          dict(new), resource_version=meta.get("resourceVersion"), old=old)
        self.last_write = now
        return True


def with_engine_conditions(old: Mapping[str, Any],
                           new: Mapping[str, Any]) -> Mapping[str, Any]:
    kept = conditions.find(old.get("conditions"), conditions.RECONCILE_ERROR)
    if kept is None or conditions.find(new.get("conditions"),
                                       conditions.RECONCILE_ERROR) is not None:
        return new
    return {**new, "conditions": [*(new.get("conditions") or []), dict(kept)]}


def reconcile_error_reporter(kube: Kube, api_version: str,
                             kind: str) -> Callable[[str, str, str | None], None]:
    """The engine's ReportFn for a kind: sets ReconcileError=True with `message`, or
    flips it to False (once) when passes succeed again. A pass that writes status
    rebuilds the conditions it owns, so this is the only writer of this one."""

    def report(namespace: str, name: str, message: str | None) -> None:
        obj = kube.get(api_version, kind, name, namespace)
        if obj is None:
            return
        old = dict(obj.get("status") or {})
        conds = list(old.get("conditions") or [])
        prior = conditions.find(conds, conditions.RECONCILE_ERROR)
        gen = int(obj["metadata"].get("generation") or 0)
        if message is None:
            if prior is None or prior.get("status") != conditions.TRUE:
                return
            new = conditions.condition(conditions.RECONCILE_ERROR, conditions.FALSE,
                                       "Recovered", "reconcile passes succeed again", gen)
        else:
            new = conditions.condition(conditions.RECONCILE_ERROR, conditions.TRUE,
                                       "ReconcileFailing", message, gen)
            if prior is not None and all(prior.get(k) == new.get(k) for k in (
                    "status", "reason", "message", "observedGeneration")):
                return  # said already: a lasting failure writes once, not per retry
        merged = [*[c for c in conds if c.get("type") != conditions.RECONCILE_ERROR],
                  *conditions.merge(conds, [new])]
        kube.patch_status(api_version, kind, name, namespace, {**old, "conditions": merged},
                          resource_version=obj["metadata"].get("resourceVersion"))

    return report
