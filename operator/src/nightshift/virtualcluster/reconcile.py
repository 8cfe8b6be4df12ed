"""VirtualCluster pass: observe → plan (pure) → apply → status, written once and only
when it changed. See plan.py for what is decided and deletion's steps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.loop import Outcome
from nightshift.engine.passes import Owner, finish_pass
from nightshift.engine.status import StatusWriter
from nightshift.kube import Kube, KubeError
from nightshift.virtualcluster import placement
from nightshift.virtualcluster.observe import Sources, observe, static_pools
from nightshift.virtualcluster.plan import Plan, plan
from nightshift.virtualcluster.spec import VirtualClusterSpec

OWNER = Owner(names.API_VERSION, names.VIRTUALCLUSTER, names.FINALIZER_VIRTUAL_CLUSTER)

GONE_MEMORY = timedelta(minutes=10)
# What running nodes accrue moves with the clock: written with other changes, or at
# most this often on its own (readers extrapolate: api/billing.node_usd_at). Without
# it every pass would write, and every write would wake the next pass.
COST_ACCRUAL = frozenset(("totalUSD", "nodeHours", "observedAt"))
COST_WRITE_INTERVAL = 60.0


@dataclass
class LoopState:
    """What one VirtualCluster's loop remembers between passes."""

    writer: StatusWriter = field(default_factory=lambda: StatusWriter(
        names.API_VERSION, names.VIRTUALCLUSTER, COST_ACCRUAL, COST_WRITE_INTERVAL))
    # Pools served by hand-labeled nodes (static mode): node events find us by them.
    static_pools: tuple[str, ...] = ()
    # When the watch saw each NodeClaim go (the end of its billing), kept a while:
    # a pass that fails settles it on the next one.
    gone_at: dict[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    kube: Kube
    sources: Sources

    @classmethod
    def from_config(cls, kube: Kube, config: OperatorConfig, **kw: Any) -> Context:
        from nightshift.aws.clients import Ec2Access
        from nightshift.virtualcluster.observe import CrdCache, load_catalog
        catalog, problem = load_catalog(config.instance_catalog)
        return cls(kube, Sources(CrdCache(), catalog, kw.get("aws") or Ec2Access(),
                                 catalog_problem=problem))


def reconcile(ctx: Context, namespace: str, name: str, state: LoopState) -> Outcome:
    kube = ctx.kube
    obs = observe(kube, ctx.sources, namespace, name, datetime.now(UTC))
    if obs is None:
        return Outcome(gone=True)
    cutoff = obs.now - GONE_MEMORY
    state.gone_at = {k: t for k, t in state.gone_at.items() if t > cutoff}
    obs = replace(obs, gone_at=dict(state.gone_at))
    state.static_pools = _static(obs.vc, obs.crds)
    vc = dict(obs.vc)
    return finish_pass(kube, OWNER, vc, plan(obs), state.writer,
                       apply=lambda v, p: _apply(ctx, v, p),
                       replan=lambda v, errors: plan(replace(obs, vc=v, errors=errors)))


def _apply(ctx: Context, vc: dict[str, Any], p: Plan) -> list[str]:
    """The plan's writes, in order; the errors a user must see, each naming the object.
    Transient API errors (KubeError.transient) raise: the engine retries."""
    errors = placement.ensure_groups(ctx.sources.aws, vc, p.ensure_groups)
    if errors:
        return errors  # node classes would name groups that do not exist
    for manifest in p.apply:
        key = f"{manifest['kind']}/{manifest['metadata']['name']}"
        try:
            ctx.kube.apply(manifest)
        except KubeError as e:
            if e.transient:
                raise
            errors.append(f"{key} was refused by the API server ({e.message}): check "
                          "what the pools pass through to it as given (spec.pools[].labels, "
                          "taints, spec.nodeClass tags and selector terms) against "
                          "Karpenter's rules; if none is at fault, this is a nightshift bug "
                          "or a Karpenter version mismatch: report it")
    if errors:
        return errors
    for ref in p.prune:
        ctx.kube.delete(ref["apiVersion"], ref["kind"], ref["name"])
    return placement.delete_groups(ctx.sources.aws, vc, p.delete_groups)


def _static(vc: Mapping[str, Any], crds: frozenset[str]) -> tuple[str, ...]:
    try:
        spec = VirtualClusterSpec.model_validate(vc.get("spec") or {})
    except ValueError:
        return ()
    return static_pools(spec, crds)
