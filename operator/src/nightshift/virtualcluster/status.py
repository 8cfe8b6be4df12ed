"""A VirtualCluster's status from what the I/O layer observed. Pure: numbers in, dict out.

The I/O layer gathers the nodes of the VirtualCluster (label nightshift.io/pool, and
nightshift.io/virtual-cluster when Karpenter made them), its NodeClaims, the CPU that
pending pods request per pool, and a price function; this module does the sums.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nightshift.api import conditions, names
from nightshift.api.problems import Problem, summarize
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.catalog import parse_quantity
from nightshift.virtualcluster.nodepools import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    Usage,
    vc_identity,
)
from nightshift.virtualcluster.provider import ProviderChoice
from nightshift.virtualcluster.spec import Pool

PriceFn = Callable[[str, str], float | None]


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return labels


def _resource(obj: Mapping[str, Any], *paths: tuple[str, ...]) -> Mapping[str, Any]:
    """The first non-empty resource list among `paths` (e.g. status.capacity)."""
    for path in paths:
        cur: Any = obj
        for key in path:
            cur = cur.get(key) if isinstance(cur, Mapping) else None
        if cur:
            return dict(cur)
    return {}


def _claim_resources(claim: Mapping[str, Any]) -> Mapping[str, Any]:
    # Capacity once the instance type is known; before that, what the pods asked for.
    return _resource(claim, ("status", "capacity"), ("spec", "resources", "requests"))


def _launching(
    nodeclaims: Sequence[Mapping[str, Any]], node_names: set[str]
) -> list[Mapping[str, Any]]:
    return [
        c for c in nodeclaims
        if not c.get("status", {}).get("nodeName")
        or c["status"]["nodeName"] not in node_names
    ]


def usage_by_nodepool(nodeclaims: Sequence[Mapping[str, Any]]) -> dict[str, Usage]:
    """Per NodePool name, what its NodeClaims hold: render_virtualcluster's `usage`."""
    acc: dict[str, list[float]] = {}
    for claim in nodeclaims:
        np = _labels(claim).get(LABEL_NODEPOOL)
        if not np:
            continue
        res = _claim_resources(claim)
        cur = acc.setdefault(np, [0.0, 0.0, 0.0])
        cur[0] += parse_quantity(res.get("cpu", 0))
        cur[1] += parse_quantity(res.get("memory", 0))
        cur[2] += 1
    return {k: Usage(cpu=v[0], memory_bytes=v[1], nodes=int(v[2])) for k, v in acc.items()}


def _gib(n: float) -> str:
    return f"{round(n / 2**30, 1):g}Gi"


def _belongs(node: Mapping[str, Any], namespace: str, vc: str) -> bool:
    """Static nodes carry only the pool label; Karpenter's carry ours and must match."""
    labels = _labels(node)
    owner = labels.get(names.LABEL_VIRTUAL_CLUSTER)
    owner_ns = labels.get(vcnames.LABEL_VC_NAMESPACE)
    return (owner is None or owner == vc) and (owner_ns is None or owner_ns == namespace)


# A launched instance that has not joined the cluster after this long: Karpenter gives it
# 15 minutes before it deletes and replaces it, a node boots in one or two.
REGISTER_GRACE_S = 300
MAX_LAUNCH_PROBLEMS = 2
# The Unknown reason of a condition Karpenter has not evaluated yet.
AWAITING = "AwaitingReconciliation"


def launch_problem(claim: Mapping[str, Any], now: str | None) -> str | None:
    """Why a launching NodeClaim has no node, when Karpenter says so (its Launched
    condition's reason) or when its instance has not registered long after launch."""
    name = claim.get("metadata", {}).get("name", "")
    conds = {c.get("type"): c for c in claim.get("status", {}).get("conditions") or []}
    launched = conds.get("Launched") or {}
    if launched.get("status") not in (None, "True") and launched.get("reason") not in (
            None, "", AWAITING):
        return f"NodeClaim {name}: {launched['reason']}: {launched.get('message', '')}"
    registered = conds.get("Registered") or {}
    since = launched.get("lastTransitionTime")
    if launched.get("status") != "True" or registered.get("status") == "True" or not (
            since and now):
        return None
    try:
        t_now, t_since = conditions.parse_rfc3339(now), conditions.parse_rfc3339(str(since))
    except ValueError:
        return None
    age = (t_now - t_since).total_seconds() if t_now and t_since else 0.0
    if age < REGISTER_GRACE_S:
        return None
    return (f"NodeClaim {name} launched {int(age // 60)} min ago but no node registered "
            f"({registered.get('message') or 'no node'}): check that the node role may join "
            "the cluster (an EKS access entry of type EC2_LINUX, or aws-auth) and the node "
            "class's subnets and security groups")


def _pool_status(
    pool: Pool,
    nodes: list[Mapping[str, Any]],
    launching: list[Mapping[str, Any]],
    pending_cpu: float,
    price: PriceFn,
    now: str | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The pool's status entry and, when it is capacity-limited, why."""
    cpu = mem = capacity_cpu = usd = 0.0
    unpriced = 0
    types: set[str] = set()
    caps: set[str] = set()
    for node in nodes:
        labels = _labels(node)
        alloc = _resource(node, ("status", "allocatable"))
        cpu += parse_quantity(alloc.get("cpu", 0))
        mem += parse_quantity(alloc.get("memory", 0))
        capacity_cpu += parse_quantity(
            _resource(node, ("status", "capacity"), ("status", "allocatable")).get("cpu", 0)
        )
        itype, cap = labels.get(LABEL_INSTANCE_TYPE), labels.get(LABEL_CAPACITY_TYPE)
        if itype:
            types.add(itype)
        if cap:
            caps.add(cap)
        if itype and cap:
            hourly = price(itype, cap)
            usd += hourly or 0.0
            unpriced += hourly is None
    launching_cpu = sum(parse_quantity(_claim_resources(c).get("cpu", 0)) for c in launching)
    # Pending pods a launching NodeClaim will take are served; the rest is the "could
    # not acquire all instances" case the user has to see.
    unserved = max(0.0, pending_cpu - launching_cpu)
    entry = {
        "name": pool.name,
        "nodes": len(nodes),
        "launching": len(launching),
        "instanceTypes": sorted(types),
        "capacityTypes": sorted(caps),
        "cpu": round(cpu, 3),
        "memory": _gib(mem),
        "pendingCPU": round(unserved, 3),
    }
    # A pool with an unpriced node has no price: a partial sum over all its CPU would
    # price the run's pods there several times too low (pipelinerun/cost.pool_rates).
    entry.update({"unpricedNodes": unpriced} if unpriced else {"hourlyUSD": round(usd, 4)})
    at_cpu = pool.max_cpu is not None and capacity_cpu + launching_cpu >= pool.max_cpu
    at_nodes = pool.max_nodes is not None and len(nodes) + len(launching) >= pool.max_nodes
    why = []
    if at_cpu:
        why.append(f"at its limit maxCPU {pool.max_cpu}")
    if at_nodes:
        why.append(f"at its limit maxNodes {pool.max_nodes}")
    if unserved > 0:
        why.append(f"{round(unserved, 3):g} CPU requested by pending pods that no node serves")
    why += [p for p in (launch_problem(c, now) for c in launching) if p][:MAX_LAUNCH_PROBLEMS]
    return entry, (f"{pool.name}: " + ", ".join(why)) if why else None


def pool_summary(pools: Sequence[Mapping[str, Any]]) -> str:
    """Every pool with its nodes, for `kubectl get nsvc`: a printer column's JSONPath
    shows only the first element of an array, so the pools are joined here."""
    return " ".join(
        f"{p['name']}={p['nodes']}" + (f"+{p['launching']}" if p.get("launching") else "")
        for p in pools)


def virtualcluster_status(
    vc: Mapping[str, Any],
    *,
    choice: ProviderChoice,
    nodes: Sequence[Mapping[str, Any]],
    nodeclaims: Sequence[Mapping[str, Any]] = (),
    pending_cpu: Mapping[str, float] | None = None,
    price: PriceFn = lambda _t, _c: None,
    problems: Sequence[Problem] = (),
    not_ready: Sequence[str] = (),
    retained: str = "",
    unchecked: str = "",
    now: str | None = None,
) -> dict[str, Any]:
    """The whole status subresource, conditions merged with the current ones.

    `not_ready` carries the I/O layer's own reasons the pools cannot work (an AWS
    error on the placement group, a failed apply, a NodePool or node class whose
    Ready condition is False), each already a sentence with its fix.
    """
    namespace, name, spec = vc_identity(vc)
    generation = int(vc.get("metadata", {}).get("generation", 0))
    pending = pending_cpu or {}
    mine = [n for n in nodes if _belongs(n, namespace, name)]
    node_names = {str(n.get("metadata", {}).get("name")) for n in mine}
    claims = [c for c in nodeclaims if _belongs(c, namespace, name)]
    launching = _launching(claims, node_names)
    pools, limited, empty = [], [], []
    for pool in spec.pools:
        p_nodes = [n for n in mine if _labels(n).get(names.LABEL_POOL) == pool.name]
        p_launch = [c for c in launching if _labels(c).get(names.LABEL_POOL) == pool.name]
        entry, why = _pool_status(pool, p_nodes, p_launch, pending.get(pool.name, 0.0), price,
                                  now)
        pools.append(entry)
        if why:
            limited.append(why)
        if not p_nodes:
            empty.append(pool.name)
    conds = _conditions(choice, problems, not_ready, limited, empty, generation, retained,
                        unchecked)
    old = (vc.get("status") or {}).get("conditions")
    applied = (generation if not problems and not choice.error
               else (vc.get("status") or {}).get("appliedGeneration"))
    return {
        **({"appliedGeneration": applied} if applied is not None else {}),
        "observedGeneration": generation,
        "provider": choice.provider,
        "mode": choice.mode,
        "pools": pools,
        "poolCount": len(pools),
        "poolSummary": pool_summary(pools),
        "nodes": sum(p["nodes"] for p in pools),
        # Unknown (absent) while any pool is: kubectl's $/h column shows nothing then.
        **({} if any("unpricedNodes" in p for p in pools)
           else {"hourlyUSD": round(sum(p["hourlyUSD"] for p in pools), 4)}),
        "conditions": conditions.merge(old, conds, now=now),
    }


def _conditions(
    choice: ProviderChoice,
    problems: Sequence[Problem],
    not_ready: Sequence[str],
    limited: list[str],
    empty: list[str],
    gen: int,
    retained: str = "",
    unchecked: str = "",
) -> list[dict[str, Any]]:
    c = conditions
    if problems:
        invalid = c.condition(c.INVALID, c.TRUE, "InvalidSpec", summarize(problems), gen)
        ready = c.condition(c.READY, c.FALSE, "Invalid", "the spec is invalid (see the "
                            "Invalid condition); nothing was applied", gen)
    else:
        invalid = c.condition(c.INVALID, c.FALSE, "Valid", "", gen)
        if choice.error:
            ready = c.condition(c.READY, c.FALSE, "ProviderUnavailable", choice.error, gen)
        elif not_ready:
            ready = c.condition(c.READY, c.FALSE, "NotReady", "; ".join(not_ready), gen)
        elif choice.mode == "static" and empty:
            ready = c.condition(
                c.READY, c.FALSE, "NoNodes",
                f"static mode: no node is labeled {names.LABEL_POOL} for pool(s) "
                f"{', '.join(empty)}: label nodes with "
                f"kubectl label node <node> {names.LABEL_POOL}=<pool>", gen,
            )
        elif retained:
            ready = c.condition(c.READY, c.TRUE, "RemovedPoolsInUse", retained, gen)
        elif unchecked:
            # Applied, but a misspelled family would only show as nodes that never come.
            ready = c.condition(c.READY, c.TRUE, "InstanceNamesNotChecked", unchecked, gen)
        else:
            reason = "Static" if choice.mode == "static" else "NodePoolsApplied"
            ready = c.condition(c.READY, c.TRUE, reason, choice.message, gen)
    if limited:
        cap = c.condition(c.CAPACITY_LIMITED, c.TRUE, "CapacityLimited", "; ".join(limited), gen)
    else:
        cap = c.condition(c.CAPACITY_LIMITED, c.FALSE, "WithinLimits", "", gen)
    return [ready, cap, invalid]
