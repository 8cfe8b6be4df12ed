"""The VirtualCluster decision: what was observed in, what to do and the status out.

Pure and level-based, like the PipelineRun planner: no I/O and no clock (`now` and the
prices of the instances seen come in `Observed`). Every pass renders the desired
NodePools and node classes, compares them with what the API server holds and re-applies
whatever drifted (a hand-edited NodePool is restored on the next pass), prunes what is
ours but no longer wanted, and computes the whole status and the events of its
condition transitions.

Deletion is a sequence of passes. Our finalizer (nightshift.io/virtual-cluster) keeps
the object while PipelineRuns that name it still run, unless it is annotated
nightshift.io/force-delete: "true"; then the NodePools go, then (once their nodes are
gone) the node classes and EC2 placement groups, and last the finalizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from nightshift.api import deletion, names
from nightshift.api.conditions import find, parse_rfc3339, rfc3339
from nightshift.api.drift import drifted
from nightshift.api.events import condition_events
from nightshift.api.ownedplan import OwnedPlan
from nightshift.virtualcluster import objectnames
from nightshift.virtualcluster.catalog import InstanceCatalog
from nightshift.virtualcluster.cost import node_cost
from nightshift.virtualcluster.nodepools import render_virtualcluster
from nightshift.virtualcluster.provider import CRD_EC2NODECLASS, detect_provider
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.status import usage_by_nodepool, virtualcluster_status
from nightshift.virtualcluster.validate import validate

PRICE_PROBLEM_CHARS = 512

# The condition a VirtualCluster being deleted carries: what it still waits for.
DELETING = deletion.DELETING

# How soon to look again when something is moving (nodes launching, pods pending, a
# deletion step under way), or after an error to retry; otherwise the resync applies.
BUSY_REQUEUE = 5.0
ERROR_REQUEUE = 30.0
# How long Karpenter may take to judge a NodePool or node class it was given (it takes
# seconds) before the VirtualCluster says it has not: unanswered().
KARPENTER_GRACE = 120.0

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Observed:
    vc: Obj
    crds: frozenset[str]
    # The instance catalog: KWOK's file, or on AWS the region's types (validation only);
    # None when unconfigured or unreadable (the names are then not checked).
    catalog: InstanceCatalog | None
    # Our NodePools and node classes as the API server holds them.
    owned: Sequence[Obj]
    nodeclaims: Sequence[Obj]
    nodes: Sequence[Obj]
    pending_cpu: Mapping[str, float]
    # USD/hour per (instance type, capacity type) of the nodes above; None: unknown.
    prices: Mapping[tuple[str, str], float | None]
    # PipelineRuns that use this VirtualCluster and have not ended (read when deleting,
    # or when a pool removed from the spec still has its NodePool).
    running_runs: Sequence[str]
    now: datetime
    # What applying this plan's writes met (refusals, AWS errors), each a sentence naming
    # the object: the reconciler plans once more with them to write the status.
    errors: Sequence[str] = ()
    # When the NodeClaim watch saw each NodeClaim go: the end of its billing.
    gone_at: Mapping[str, datetime] = field(default_factory=dict)
    # Why some prices are unknown, with the fix ("" when none is, or no reason is known).
    price_problem: str = ""
    # Of the retired_groups (status.placementGroups no longer wanted), those whose EC2
    # group still exists.
    groups_left: frozenset[str] = frozenset()
    # On AWS, why the pools' families and instance types could not be checked (no
    # region's catalog), with the grant; "" when they were, or name none.
    names_unchecked: str = ""


@dataclass(frozen=True)
class Plan(OwnedPlan):
    # Pools whose EC2 placement group must exist before the node classes are applied,
    # and, when deleting, pools whose group goes (after their nodes). Prune lists
    # NodePools first.
    ensure_groups: tuple[str, ...] = ()
    delete_groups: tuple[str, ...] = ()


def plan(o: Observed) -> Plan:
    meta = o.vc["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    mine = names.FINALIZER_VIRTUAL_CLUSTER in finalizers
    deleting = bool(meta.get("deletionTimestamp"))
    if deleting and not mine:
        return Plan(gone=True)
    try:
        spec: VirtualClusterSpec | None = VirtualClusterSpec.model_validate(o.vc.get("spec") or {})
        spec_error: ValidationError | None = None
    except ValidationError as e:
        spec, spec_error = None, e
    if deleting:
        forced = (meta.get("annotations") or {}).get(names.ANNOTATION_FORCE_DELETE) == "true"
        if not o.running_runs or forced:
            return _finalize(o, spec)
    if spec is None:
        assert spec_error is not None  # noqa: S101  (invariant for mypy: no spec means an error)
        return _status_plan(o, _unreadable_status(o, spec_error), ERROR_REQUEUE,
                            add_finalizer=not mine and not deleting)
    return _steady(o, spec, add_finalizer=not mine and not deleting, deleting=deleting)


def _steady(o: Observed, spec: VirtualClusterSpec, *, add_finalizer: bool,
            deleting: bool) -> Plan:
    namespace, name = o.vc["metadata"]["namespace"], o.vc["metadata"]["name"]
    choice = detect_provider(o.crds, spec.provider)
    problems = validate(spec, choice.provider, o.catalog)
    not_ready = list(o.errors)
    apply: list[dict[str, Any]] = []
    prune: list[dict[str, str]] = []
    groups: tuple[str, ...] = ()
    retained = ""
    if not problems and not choice.error and not deleting:
        if choice.provider == "aws":
            groups = tuple(placement_pools(spec))
        rendered = render_virtualcluster(o.vc, choice.provider, catalog=o.catalog,
                                         usage=usage_by_nodepool(o.nodeclaims))
        present = {(obj["kind"], obj["metadata"]["name"]): obj for obj in o.owned}
        apply = [m for m in rendered
                 if drifted(m, present.get((m["kind"], m["metadata"]["name"])))]
        wanted = {(m["kind"], m["metadata"]["name"]) for m in rendered}
        # A pool removed from the spec while runs use this VirtualCluster keeps its
        # NodePool (and nodes): its running pods would be evicted, and its retried ones
        # would find no node. It goes once those runs end.
        kept = set(removed_pools(spec, o.owned)) if o.running_runs else set()
        prune = [_ref(obj) for obj in _nodepools_first(o.owned)
                 if (obj["kind"], obj["metadata"]["name"]) not in wanted
                 and ((obj["metadata"].get("labels") or {}).get(names.LABEL_POOL)
                      not in kept)]
        if kept:
            many = len(kept) > 1
            retained = (f"{'pools' if many else 'pool'} {', '.join(sorted(kept))} removed "
                        f"from spec.pools {'are' if many else 'is'} kept (NodePool, node "
                        f"class and nodes) while runs use this VirtualCluster: "
                        f"{', '.join(o.running_runs)}; {'they go' if many else 'it goes'} "
                        "once those end")
        not_ready += not_ready_messages(o.owned)
        not_ready += unanswered(o.owned, o.now)
    status = virtualcluster_status(
        o.vc, choice=choice, nodes=o.nodes, nodeclaims=o.nodeclaims,
        pending_cpu=o.pending_cpu, price=lambda t, c: o.prices.get((t, c)),
        problems=problems, not_ready=not_ready, retained=retained,
        unchecked=o.names_unchecked, now=rfc3339(o.now))
    status["cost"] = node_cost((o.vc.get("status") or {}).get("cost"), o.nodeclaims,
                               o.prices, spec.billing, o.now, o.gone_at)
    cost = status["cost"]
    if cost.get("unpricedNodes") or cost.get("unpricedEndedNodes"):
        # Ended unpriced nodes are never priced again: the reason they were stays, unless
        # running nodes are unpriced now (their reason, if any, is today's).
        why = o.price_problem or ("" if cost.get("unpricedNodes") else (
            (o.vc.get("status") or {}).get("cost") or {}).get("unpricedReason", ""))
        if why:
            cost["unpricedReason"] = why[:PRICE_PROBLEM_CHARS]
    if deleting:
        status["conditions"] = _with_deleting(o, status["conditions"],
                                              blocked(namespace, name, o.running_runs))
    requeue: float | None = ERROR_REQUEUE if not_ready else None
    if any(_awaiting(obj) for obj in o.owned) and not deleting:
        # Nothing may come from Karpenter to wake the loop: look again when it is due.
        requeue = min(requeue or KARPENTER_GRACE, KARPENTER_GRACE / 4)
    if deleting or retained or any(p.get("launching") or p.get("pendingCPU")
                                   for p in status["pools"]):
        requeue = BUSY_REQUEUE
    retired = retired_groups(o.vc, spec)
    # A group whose pool left (removed, or placement no longer cluster) goes once no
    # node of the pool is left in it; its entry stays until a pass sees it gone.
    idle = tuple(p for p in retired if p in o.groups_left and not _pool_in_use(o, p))
    made = sorted({*groups, *(p for p in made_groups(o.vc)
                             if p not in retired or p in o.groups_left)})
    if made:
        status["placementGroups"] = made
    if any(p in o.groups_left for p in retired):
        requeue = BUSY_REQUEUE  # until the group is seen gone
    if o.errors:
        # The writes this plan asked for met errors: do not repeat them in this pass
        # (nor prune while the new set is not fully in place); the next pass retries.
        apply, prune, groups, idle = [], [], (), ()
    return Plan(add_finalizer=add_finalizer, ensure_groups=groups, apply=apply, prune=prune,
                delete_groups=idle, status=status, events=condition_events(
                    (o.vc.get("status") or {}).get("conditions"), status["conditions"]),
                requeue_after=requeue)


def _finalize(o: Observed, spec: VirtualClusterSpec | None) -> Plan:
    """One deletion step; the finalizer goes only once nothing of ours is left."""
    namespace, name = o.vc["metadata"]["namespace"], o.vc["metadata"]["name"]
    nodepools = [obj for obj in o.owned if obj["kind"] == "NodePool"]
    classes = [obj for obj in o.owned if obj["kind"] != "NodePool"]
    ours = [n for n in o.nodes if _owned_node(n, namespace, name)]
    if nodepools or o.nodeclaims or ours:
        return _deleting(o, "RemovingNodes", (
            f"waiting for {len(ours)} node(s) and {len(o.nodeclaims)} NodeClaim(s) of this "
            "VirtualCluster to go; nodes running pods with karpenter.sh/do-not-disrupt wait "
            "for them"), prune=[_ref(np) for np in nodepools])
    if classes:
        return _deleting(o, "RemovingNodeClasses", f"waiting for {len(classes)} node "
                         "class(es) to go", prune=[_ref(c) for c in classes])
    groups = tuple(sorted({*placement_pools(spec), *made_groups(o.vc)})
                   ) if CRD_EC2NODECLASS in o.crds else ()
    if o.errors:
        return _deleting(o, "PlacementGroupError", "; ".join(o.errors), ERROR_REQUEUE)
    return Plan(delete_groups=groups, remove_finalizer=True, gone=True)


def _deleting(o: Observed, reason: str, message: str, requeue: float = BUSY_REQUEUE,
              prune: list[dict[str, str]] | None = None) -> Plan:
    status = dict(o.vc.get("status") or {})
    status["conditions"] = _with_deleting(o, list(status.get("conditions") or []),
                                          (reason, message))
    return _status_plan(o, status, requeue, prune=prune or [])


def _status_plan(o: Observed, status: dict[str, Any], requeue: float | None,
                 **kw: Any) -> Plan:
    return Plan(status=status, requeue_after=requeue, events=condition_events(
        (o.vc.get("status") or {}).get("conditions"), status.get("conditions")), **kw)


def removed_pools(spec: VirtualClusterSpec, owned: Sequence[Obj]) -> list[str]:
    """Pools no longer in spec.pools whose NodePools or node classes are still there."""
    wanted = {p.name for p in spec.pools}
    return sorted({str(pool) for obj in owned
                   if (pool := ((obj.get("metadata") or {}).get("labels") or {}).get(
                       names.LABEL_POOL)) and pool not in wanted})


def placement_pools(spec: VirtualClusterSpec | None) -> list[str]:
    return [p.name for p in spec.pools if p.placement == "cluster"] if spec else []


def made_groups(vc: Obj) -> list[str]:
    """The pools whose placement group this VirtualCluster made (status.placementGroups):
    the record that outlives a pool's removal from the spec."""
    return [str(p) for p in (vc.get("status") or {}).get("placementGroups") or []]


def retired_groups(vc: Obj, spec: VirtualClusterSpec | None) -> list[str]:
    """Made groups whose pool no longer asks for one."""
    wanted = set(placement_pools(spec))
    return [p for p in made_groups(vc) if p not in wanted]


def _pool_in_use(o: Observed, pool: str) -> bool:
    """Any NodePool, node class, NodeClaim or node of `pool` left (its instances may be
    in the group, which EC2 will not delete while they run)."""
    namespace, name = o.vc["metadata"]["namespace"], o.vc["metadata"]["name"]
    nodes = [n for n in o.nodes if _owned_node(n, namespace, name)]
    return any((obj["metadata"].get("labels") or {}).get(names.LABEL_POOL) == pool
               for obj in (*o.owned, *o.nodeclaims, *nodes))


# The VirtualCluster field behind each of an EC2NodeClass's conditions that a user's
# value can fail (karpenter-provider-aws pkg/controllers/nodeclass).
CONDITION_FIELDS = {
    "SubnetsReady": "spec.nodeClass.subnetSelectorTerms",
    "SecurityGroupsReady": "spec.nodeClass.securityGroupSelectorTerms",
    "AMIsReady": "spec.nodeClass.amiAlias or spec.nodeClass.amiSelectorTerms",
    "InstanceProfileReady": "spec.nodeClass.role or spec.nodeClass.instanceProfile",
}


def not_ready_messages(objs: Sequence[Obj]) -> list[str]:
    """Karpenter's own Ready=False messages on our NodePools and node classes. Karpenter
    computes Ready from the others ("UnhealthyDependents: SubnetsReady=False"), so the
    failing ones are quoted instead, each with the field that sets it where one does."""
    out = []
    for obj in objs:
        conds = (obj.get("status") or {}).get("conditions") or []
        c = find(conds, "Ready")
        if c is None or c.get("status") != "False":
            continue
        failing = [d for d in conds if d.get("type") != "Ready" and d.get("status") == "False"]
        said = "; ".join(
            f"{d.get('type')}: {d.get('reason', '')}: {d.get('message', '')}"
            + (f"; check {CONDITION_FIELDS[d['type']]}"
               if d.get("type") in CONDITION_FIELDS else "")
            for d in failing) or f"{c.get('reason', '')}: {c.get('message', '')}"
        out.append(f"{obj['kind']} {obj['metadata']['name']} is not ready ({said})")
    return out


def unanswered(objs: Sequence[Obj], now: datetime) -> list[str]:
    """Our NodePools and node classes that Karpenter has not judged (no Ready True or
    False) KARPENTER_GRACE seconds after they were made. Karpenter marks them within
    seconds; none means its controller is not running, or does not watch this kind, and
    pods would wait for nodes that never come while the VirtualCluster said Ready."""
    out = []
    for obj in objs:
        made = parse_rfc3339(obj["metadata"].get("creationTimestamp"))
        if not _awaiting(obj) or made is None or (now - made).total_seconds() < KARPENTER_GRACE:
            continue
        ready = find((obj.get("status") or {}).get("conditions"), "Ready")
        said = (f" (Ready is Unknown: {ready.get('reason', '')}: {ready.get('message', '')})"
                if ready else "")
        out.append(f"{obj['kind']} {obj['metadata']['name']} has no Ready from Karpenter "
                   f"{KARPENTER_GRACE / 60:.0f} minutes after it was made{said}: is "
                   "Karpenter's controller running, with the CRDs of this release? "
                   "(kubectl get pods -A -l app.kubernetes.io/name=karpenter)")
    return out


def _awaiting(obj: Obj) -> bool:
    """Not yet judged by Karpenter: Ready neither True nor False."""
    ready = find((obj.get("status") or {}).get("conditions"), "Ready")
    return ready is None or ready.get("status") not in ("True", "False")


def blocked(namespace: str, name: str, blockers: Sequence[str]) -> tuple[str, str]:
    return deletion.blocked("virtualcluster", namespace, name, blockers,
                            "their pending tasks then find no nodes")


def _with_deleting(o: Observed, conds: list[dict[str, Any]],
                   why: tuple[str, str]) -> list[dict[str, Any]]:
    return deletion.with_deleting(o.vc, conds, why, rfc3339(o.now))


def _unreadable_status(o: Observed, e: ValidationError) -> dict[str, Any]:
    return deletion.unreadable_status(o.vc, e, rfc3339(o.now))


def _owned_node(node: Obj, namespace: str, name: str) -> bool:
    """A node Karpenter launched for this VirtualCluster (static nodes are not ours)."""
    labels = node.get("metadata", {}).get("labels") or {}
    return (labels.get(names.LABEL_VIRTUAL_CLUSTER) == name
            and labels.get(objectnames.LABEL_VC_NAMESPACE) == namespace)


def _nodepools_first(objs: Sequence[Obj]) -> list[Obj]:
    # A class in use by a NodePool cannot go first.
    return sorted(objs, key=lambda obj: obj["kind"] != "NodePool")


def _ref(obj: Obj) -> dict[str, str]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"]}
