"""SharedStorage pass: observe → plan (pure) → apply → status, written once and only
when it changed. See plan.py for what is decided and deletion's steps."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.finalizers import set_finalizer
from nightshift.engine.loop import Outcome
from nightshift.engine.status import StatusWriter
from nightshift.kube import Kube, KubeError
from nightshift.sharedstorage.observe import Sources, observe
from nightshift.sharedstorage.plan import Plan, plan

log = logging.getLogger("nightshift")


@dataclass
class LoopState:
    """What one SharedStorage's loop remembers between passes."""

    writer: StatusWriter = field(default_factory=lambda: StatusWriter(
        names.API_VERSION, names.SHAREDSTORAGE))


@dataclass(frozen=True)
class Context:
    kube: Kube
    sources: Sources

    @classmethod
    def from_config(cls, kube: Kube, config: OperatorConfig) -> Context:
        return cls(kube, Sources(cluster_cidrs=config.cluster_cidrs,
                                 image_registry=config.storage_image_registry,
                                 image_tag=config.storage_image_tag))


def reconcile(ctx: Context, namespace: str, name: str, state: LoopState) -> Outcome:
    kube = ctx.kube
    obs = observe(kube, ctx.sources, namespace, name, datetime.now(UTC))
    if obs is None:
        return Outcome(gone=True)
    p = plan(obs)
    obj = dict(obs.storage)
    if p.add_finalizer:
        # Before anything exists: the cluster-scoped PV must not outlive the object.
        obj = _set_finalizer(kube, obj, add=True)
    errors = _apply(kube, p)
    if errors:
        p = plan(replace(obs, storage=obj, errors=tuple(errors)))
    elif p.remove_finalizer:
        _set_finalizer(kube, obj, add=False)
        log.info("SharedStorage %s/%s: cleaned up, finalizer removed", namespace, name)
        return Outcome(gone=True)
    if p.gone:
        return Outcome(gone=True)
    if p.status is not None and state.writer.write(kube, obj, p.status):
        for ev in p.events:
            # An event lost is not worth failing the pass for.
            with contextlib.suppress(KubeError):
                kube.event(obj, ev.type, ev.reason, ev.message)
    return Outcome(requeue_after=p.requeue_after)


def _apply(kube: Kube, p: Plan) -> list[str]:
    """The plan's writes, in order; the errors a user must see, each naming the object.
    Transient API errors (conflicts, throttling, 5xx) raise: the engine retries."""
    errors: list[str] = []
    for manifest in p.apply:
        key = f"{manifest['kind']}/{manifest['metadata']['name']}"
        try:
            kube.apply(manifest)
        except KubeError as e:
            if e.status in (409, 429) or e.status >= 500:
                raise
            errors.append(f"{key} was refused by the API server ({e.message}); if the "
                          "message names a field of the spec, fix it there, otherwise "
                          "this is a nightshift bug: report it")
    if errors:
        return errors
    for ref in p.prune:
        try:
            kube.delete(ref["apiVersion"], ref["kind"], ref["name"], ref.get("namespace"))
        except KubeError as e:
            if e.status in (409, 429) or e.status >= 500:
                raise
            errors.append(f"deleting {ref['kind']}/{ref['name']} was refused ({e.message})")
    return errors


def _set_finalizer(kube: Kube, obj: dict[str, Any], *, add: bool) -> dict[str, Any]:
    return set_finalizer(kube, names.API_VERSION, names.SHAREDSTORAGE, obj,
                         names.FINALIZER_SHARED_STORAGE, add=add)
