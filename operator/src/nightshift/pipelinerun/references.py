"""A run's VirtualCluster, pools and ServiceAccounts, checked against the cluster. Pure.

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
REASON_ACCOUNT = "WaitingForServiceAccount"


@dataclass(frozen=True)
class References:
    spec: PipelineRunSpec
    # "<field>: <what is missing and the fix>", for the run's Progressing condition.
    waiting: list[str] = field(default_factory=list)
    # The stages that may not start yet (all of them while the VirtualCluster is absent).
    waiting_stages: frozenset[str] = frozenset()
    # The Progressing reason while waiting.
    reason: str = ""


def service_accounts(spec: PipelineRunSpec) -> list[str]:
    """The ServiceAccounts the stages name (each is read once per pass)."""
    return sorted({st.service_account_name for st in spec.stages if st.service_account_name})


def check(spec: PipelineRunSpec, namespace: str,
          observed: Mapping[str, Mapping[str, Any] | None],
          accounts: Mapping[str, bool] | None = None) -> References:
    """`observed`: the VirtualCluster spec.virtualCluster names, by name (None: it does
    not exist); a name not in it was not read, and nothing is checked. `accounts`:
    whether each ServiceAccount the stages name exists (unread ones are not checked)."""
    sa = _accounts(spec, namespace, accounts or {})
    vc_refs = _virtual_cluster(spec, namespace, observed)
    return References(vc_refs.spec, [*vc_refs.waiting, *sa.waiting],
                      vc_refs.waiting_stages | sa.waiting_stages,
                      vc_refs.reason or sa.reason)


def _accounts(spec: PipelineRunSpec, namespace: str,
              accounts: Mapping[str, bool]) -> References:
    """A Job whose ServiceAccount is missing makes no pod at all (the Job controller's
    events say why, the run would not): the stage waits, naming it."""
    waiting, blocked = [], set()
    for i, st in enumerate(spec.stages):
        name = st.service_account_name
        if name and accounts.get(name, True) is False:
            waiting.append(f"spec.stages[{i}].serviceAccountName: no ServiceAccount '{name}' "
                           f"in namespace {namespace}: kubectl create serviceaccount {name} "
                           f"-n {namespace}, or fix the name; the stage waits until it exists")
            blocked.add(st.name)
    return References(spec, waiting, frozenset(blocked), REASON_ACCOUNT if waiting else "")


def _virtual_cluster(spec: PipelineRunSpec, namespace: str,
                     observed: Mapping[str, Mapping[str, Any] | None]) -> References:
    vc = spec.virtual_cluster
    if not vc or vc not in observed:
        return References(spec)
    virtual_cluster = observed[vc]
    if virtual_cluster is None:
        return References(spec, [
            f"spec.virtualCluster: no VirtualCluster '{vc}' in namespace {namespace}: "
            f"create it, or name one of `kubectl get virtualclusters -n {namespace}`; "
            "no stage starts until it exists"],
            frozenset(st.name for st in spec.stages), REASON)
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
    return References(spec.model_copy(update={"stages": stages}), waiting, frozenset(blocked),
                      REASON if waiting else "")

