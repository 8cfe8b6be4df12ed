"""A run's VirtualCluster and pools, checked against the cluster. Pure.

A run naming a VirtualCluster that does not exist, or a pool its VirtualCluster lacks,
would otherwise make pods that stay Pending forever with nothing on the run to say why.
Both are waits, not spec errors: the VirtualCluster may be created (or given the pool)
after the run, as a SharedStorage may. The stages that would start wait, and the run's
Progressing condition names the field, the object and the fix.

A stage without `pool` in a run with a VirtualCluster runs on the VirtualCluster's first
pool (its default), so its pods land on that VirtualCluster's nodes and tolerate their
taint instead of matching no node at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nightshift.pipelinerun.spec import PipelineRunSpec

REASON = "WaitingForVirtualCluster"


@dataclass(frozen=True)
class References:
    spec: PipelineRunSpec
    # "<field>: <what is missing and the fix>", for the run's Progressing condition.
    waiting: list[str] = field(default_factory=list)
    # The stages that may not start yet (all of them while the VirtualCluster is absent).
    waiting_stages: frozenset[str] = frozenset()


def check(spec: PipelineRunSpec, namespace: str,
          observed: Mapping[str, Mapping[str, Any] | None]) -> References:
    """`observed`: the VirtualCluster spec.virtualCluster names, by name (None: it does
    not exist); a name not in it was not read, and nothing is checked."""
    vc = spec.virtual_cluster
    if not vc or vc not in observed:
        return References(spec)
    virtual_cluster = observed[vc]
    if virtual_cluster is None:
        return References(spec, [
            f"spec.virtualCluster: no VirtualCluster '{vc}' in namespace {namespace}: "
            f"create it, or name one of `kubectl get virtualclusters -n {namespace}`; "
            "no stage starts until it exists"],
            frozenset(st.name for st in spec.stages))
    pools = [str(p.get("name")) for p in
             ((virtual_cluster.get("spec") or {}).get("pools") or []) if p.get("name")]
    waiting: list[str] = []
    blocked: set[str] = set()
    stages = []
    for i, st in enumerate(spec.stages):
        if st.pool is None and pools:
            stages.append(st.model_copy(update={"pool": pools[0]}))
            continue
        if st.pool is not None and st.pool not in pools:
            waiting.append(
                f"spec.stages[{i}].pool: VirtualCluster '{vc}' has no pool '{st.pool}' "
                f"(its pools: {', '.join(pools) or 'none'}): add it to the VirtualCluster "
                "or name one of its pools; the stage waits until it exists")
            blocked.add(st.name)
        stages.append(st)
    return References(spec.model_copy(update={"stages": stages}), waiting, frozenset(blocked))
