"""SharedStorage pass: observe → plan (pure) → apply → status, written once and only
when it changed. See plan.py for what is decided and deletion's steps."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from nightshift.api import names, refusals
from nightshift.config import OperatorConfig
from nightshift.engine.loop import Outcome
from nightshift.engine.passes import Owner, finish_pass
from nightshift.engine.status import StatusWriter
from nightshift.kube import Kube, KubeError
from nightshift.sharedstorage.observe import Sources, observe
from nightshift.sharedstorage.plan import plan
from nightshift.sharedstorage.plantypes import Plan

OWNER = Owner(names.API_VERSION, names.SHAREDSTORAGE, names.FINALIZER_SHARED_STORAGE)


@dataclass
class LoopState:
    """What one SharedStorage's loop remembers between passes."""

    writer: StatusWriter = field(default_factory=lambda: StatusWriter(
        names.API_VERSION, names.SHAREDSTORAGE))
    # Plan.awaiting_virtual_cluster of the last pass.
    awaiting_virtual_cluster: str | None = None


@dataclass(frozen=True)
class Context:
    kube: Kube
    sources: Sources

    @classmethod
    def from_config(cls, kube: Kube, config: OperatorConfig) -> Context:
        return cls(kube, Sources(cluster_cidrs=config.cluster_cidrs,
                                 image_registry=config.storage_image_registry,
                                 image_tag=config.storage_image_tag,
                                 load_balancer_grace=config.load_balancer_grace))


def reconcile(ctx: Context, namespace: str, name: str, state: LoopState) -> Outcome:
    kube = ctx.kube
    obs = observe(kube, ctx.sources, namespace, name, datetime.now(UTC))
    if obs is None:
        return Outcome(gone=True)
    obj = dict(obs.storage)
    first = plan(obs)
    state.awaiting_virtual_cluster = first.awaiting_virtual_cluster
    return finish_pass(kube, OWNER, obj, first, state.writer,
                       apply=lambda _obj, p: _apply(kube, p),
                       replan=lambda o, errors: plan(replace(obs, storage=o, errors=errors)))


def _apply(kube: Kube, p: Plan) -> list[str]:
    """The plan's writes, in order; the errors a user must see, each naming the object.
    Transient API errors (KubeError.transient) raise: the engine retries."""
    errors: list[str] = []
    for manifest in p.apply:
        key = f"{manifest['kind']}/{manifest['metadata']['name']}"
        try:
            kube.apply(manifest)
        except KubeError as e:
            if e.transient:
                raise
            errors.append(f"{key} was refused by the API server ({e.message}); "
                          f"{_refusal_fix(e.message)}")
    if errors:
        return errors
    for ref in p.prune:
        try:
            kube.delete(ref["apiVersion"], ref["kind"], ref["name"], ref.get("namespace"))
        except KubeError as e:
            if e.transient:
                raise
            errors.append(
                f"deleting {ref['kind']}/{ref['name']}, which the storage no longer needs, "
                f"was refused by the API server ({e.message}); the operator's role must "
                "allow delete on it (the chart's does) and no admission webhook may guard "
                "it, or delete it by hand")
    return errors


def _refusal_fix(message: str) -> str:
    """What to do about a refused write: a full quota is the namespace's to raise (a
    LoadBalancer Service, a claim's storage); anything else names a field, or is ours."""
    if refusals.kind(message) == "quota":
        return ("the namespace's ResourceQuota is full for it: raise the quota, or ask "
                "for less (spec.cvmfs.squid.service.type ClusterIP for a LoadBalancer, a "
                "smaller spec.nfs.backing.pvc.size for a claim)")
    return ("if the message names a field of the spec, fix it there, otherwise this is a "
            "nightshift bug: report it")
