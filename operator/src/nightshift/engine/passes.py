"""The end of a pass for a kind that owns a finalizer (VirtualCluster, SharedStorage),
and the posting of a pass's events, which PipelineRun's pass shares.

Each kind observes and plans its own way; from the plan on the steps are the same, and
their order is what keeps deletion safe: the finalizer before anything is made (nothing
cluster-scoped may outlive the object), the plan's writes, then either the finalizer's
removal (everything is cleaned up) or the status, written once and only when it
changed, with its events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nightshift.api import refusals
from nightshift.api.events import Event
from nightshift.api.ownedplan import OwnedPlan
from nightshift.engine.loop import Outcome
from nightshift.engine.status import StatusWriter
from nightshift.kube import Kube, KubeError

log = logging.getLogger("nightshift")


P = TypeVar("P", bound=OwnedPlan)


@dataclass(frozen=True)
class Owner:
    """The kind whose objects carry `finalizer`."""

    api_version: str
    kind: str
    finalizer: str

    def set_finalizer(self, kube: Kube, obj: dict[str, Any], *, add: bool) -> dict[str, Any]:
        """`obj` as the server holds it after adding (or removing) the finalizer: one
        merge patch, guarded by the resourceVersion read (a concurrent edit makes it a
        409, which the engine retries)."""
        meta = obj["metadata"]
        current = [f for f in meta.get("finalizers") or [] if f != self.finalizer]
        wanted = [*current, self.finalizer] if add else current
        return kube.merge_patch(self.api_version, self.kind, meta["name"], meta["namespace"],
                                {"metadata": {"finalizers": wanted,
                                              "resourceVersion": meta.get("resourceVersion")}})


def finish_pass(kube: Kube, owner: Owner, obj: dict[str, Any], plan: P, writer: StatusWriter,
                apply: Callable[[dict[str, Any], P], list[str]],
                replan: Callable[[dict[str, Any], tuple[str, ...]], P]) -> Outcome:
    """Carry out `plan` for `obj`. `apply` makes the plan's writes and returns the errors
    a user must see; with any, `replan` plans again with them (into a condition)."""
    meta = obj["metadata"]
    if plan.add_finalizer:
        obj = owner.set_finalizer(kube, obj, add=True)
    errors = apply(obj, plan)
    if errors:
        plan = replan(obj, tuple(errors))
    elif plan.remove_finalizer:
        owner.set_finalizer(kube, obj, add=False)
        log.info("%s %s/%s: cleaned up, finalizer removed", owner.kind, meta["namespace"],
                 meta["name"])
        return Outcome(gone=True)
    if plan.gone:
        return Outcome(gone=True)
    if plan.status is not None and writer.write(kube, obj, plan.status):
        post_events(kube, obj, plan.events)
    return Outcome(requeue_after=plan.requeue_after)


def post_events(kube: Kube, obj: dict[str, Any], events: Sequence[Event]) -> None:
    """A pass's events on `obj`. An event lost is not worth failing the pass for (the
    status already says what it would), but the log says which and why."""
    for ev in events:
        try:
            kube.event(obj, ev.type, ev.reason, ev.message)
        except KubeError as e:
            if refusals.terminating(e.message):
                return  # the namespace goes, and the object with it
            meta = obj.get("metadata") or {}
            log.warning("%s %s/%s: event %s not posted: %s %s: %s", obj.get("kind"),
                        meta.get("namespace"), meta.get("name"), ev.reason, e.status,
                        e.reason, e.message)
