"""The VirtualCluster planner: drift re-applied, pruning, finalizer, deletion steps,
errors from the apply step, time from `Observed.now` only."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from nightshift.api import names
from nightshift.api.drift import contains, drifted
from nightshift.virtualcluster.nodepools import render_virtualcluster
from nightshift.virtualcluster.plan import (
    DELETING,
    KARPENTER_GRACE,
    Observed,
    plan,
    removed_pools,
)
from nightshift.virtualcluster.provider import (
    CRD_EC2NODECLASS,
    CRD_KWOKNODECLASS,
    CRD_NODEPOOL,
)
from nightshift.virtualcluster.spec import VirtualClusterSpec
from tests.unit.vcfixtures import POOLS, catalog, vc

KWOK = frozenset({CRD_NODEPOOL, CRD_KWOKNODECLASS})
AWS = frozenset({CRD_NODEPOOL, CRD_EC2NODECLASS})
NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def kwok_vc(*pools: dict[str, Any], finalizer: bool = True, **meta: Any) -> dict[str, Any]:
    obj = vc(*pools, provider="kwok")
    obj["spec"].pop("nodeClass")
    if finalizer:
        obj["metadata"]["finalizers"] = [names.FINALIZER_VIRTUAL_CLUSTER]
    obj["metadata"].update(meta)
    return obj


def observed(obj: dict[str, Any], *, owned: list[dict[str, Any]] | None = None,
             crds: frozenset[str] = KWOK, **kw: Any) -> Observed:
    base: dict[str, Any] = {"nodeclaims": (), "nodes": (), "pending_cpu": {}, "prices": {},
                            "running_runs": ()}
    base.update(kw)
    return Observed(vc=obj, crds=crds, catalog=catalog() if crds == KWOK else None,
                    owned=owned if owned is not None else [], now=NOW, **base)


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def as_served(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the API server gives back: our fields plus defaults and status."""
    out = []
    for m in copy.deepcopy(manifests):
        m["metadata"]["resourceVersion"] = "7"
        m["metadata"]["uid"] = "u"
        if m["kind"] == "NodePool":
            m["spec"]["template"]["spec"]["expireAfter"] = "720h"
            m["spec"].setdefault("disruption", {})["budgets"] = [{"nodes": "10%"}]
        m["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        out.append(m)
    return out


def rendered(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return render_virtualcluster(obj, "kwok", catalog=catalog(), usage={})


def test_first_pass_adds_the_finalizer_and_applies_everything() -> None:
    obj = kwok_vc(POOLS["spot-compute"], finalizer=False)
    p = plan(observed(obj))
    assert p.add_finalizer
    assert [m["kind"] for m in p.apply] == [m["kind"] for m in rendered(obj)]
    assert p.status is not None and p.status["provider"] == "kwok"


def test_nothing_is_applied_when_the_server_holds_what_we_render() -> None:
    obj = kwok_vc(POOLS["spot-compute"], POOLS["memory"])
    p = plan(observed(obj, owned=as_served(rendered(obj))))
    assert p.apply == [] and p.prune == [] and not p.add_finalizer


def test_a_hand_edited_nodepool_is_re_applied() -> None:
    obj = kwok_vc(POOLS["spot-compute"])
    served = as_served(rendered(obj))
    pool = next(o for o in served if o["kind"] == "NodePool")
    pool["spec"]["limits"]["cpu"] = "100000"  # someone raised the limit by hand
    p = plan(observed(obj, owned=served))
    assert [m["metadata"]["name"] for m in p.apply] == [pool["metadata"]["name"]]


def test_a_removed_label_or_requirement_is_drift_an_added_one_is_not() -> None:
    obj = kwok_vc(POOLS["spot-compute"])
    desired = next(m for m in rendered(obj) if m["kind"] == "NodePool")
    served = as_served([desired])[0]
    assert not drifted(desired, served)
    extra = copy.deepcopy(served)
    extra["metadata"]["labels"]["team"] = "x"
    assert not drifted(desired, extra)
    gone = copy.deepcopy(served)
    gone["metadata"]["labels"].pop(names.LABEL_VIRTUAL_CLUSTER)
    assert drifted(desired, gone)
    fewer = copy.deepcopy(served)
    fewer["spec"]["template"]["spec"]["requirements"].pop()
    assert drifted(desired, fewer)
    assert drifted(desired, None)


def test_a_field_we_applied_and_no_longer_render_is_drift() -> None:
    """The server's managedFields say what our apply owns: a pool's maxCPU removed leaves
    limits.cpu there, and only our own fields count (another manager's are not ours to
    remove). tests/integration/test_drift_live.py has the server's own copies."""
    obj = kwok_vc(POOLS["spot-compute"])
    desired = next(m for m in rendered(obj) if m["kind"] == "NodePool")
    desired["spec"].pop("limits", None)
    served = as_served([desired])[0]
    served["spec"]["limits"] = {"cpu": "64"}
    owned: dict[str, Any] = {"f:spec": {"f:limits": {"f:cpu": {}}}}
    served["metadata"]["managedFields"] = [{"manager": "someone-else", "operation": "Apply",
                                            "fieldsV1": owned}]
    assert not drifted(desired, served)
    served["metadata"]["managedFields"].append(
        {"manager": names.FIELD_MANAGER, "operation": "Apply", "fieldsV1": owned})
    assert drifted(desired, served)
    # An atomic map (one field to the server) holding a key we no longer render.
    labels = served["spec"]["template"]["metadata"].setdefault("labels", {})
    served["spec"].pop("limits")
    served["metadata"]["managedFields"] = [{
        "manager": names.FIELD_MANAGER, "operation": "Apply",
        "fieldsV1": {"f:spec": {"f:template": {"f:metadata": {"f:labels": {}}}}}}]
    assert not drifted(desired, served)
    assert desired["spec"]["template"]["metadata"]["labels"], "the pool's node labels"
    labels["gone"] = "x"
    assert drifted(desired, served)


def test_a_zero_value_the_server_does_not_keep_is_not_drift() -> None:
    desired: dict[str, Any] = {"kind": "PersistentVolume", "metadata": {"name": "pv"},
                               "spec": {"storageClassName": "", "capacity": {"storage": "1Gi"}}}
    served: dict[str, Any] = {"kind": "PersistentVolume", "metadata": {"name": "pv"},
              "spec": {"capacity": {"storage": "1Gi"}, "volumeMode": "Filesystem"}}
    assert not drifted(desired, served)
    served["spec"]["storageClassName"] = "gp3"
    assert drifted(desired, served)
    # false is not dropped: its absence (a hand edit) changes what the pod may do.
    pod: dict[str, Any] = {"kind": "DaemonSet", "metadata": {"name": "c"},
                           "spec": {"automountServiceAccountToken": False}}
    assert drifted(pod, {"kind": "DaemonSet", "metadata": {"name": "c"}, "spec": {}})


def test_replicas_handed_to_an_hpa_are_not_taken_back() -> None:
    """A squid Deployment rendered without replicas once its HPA scales it: removing the
    field by apply would reset it to 1 before the HPA writes it."""
    desired: dict[str, Any] = {"kind": "Deployment", "metadata": {"name": "squid"},
                               "spec": {"template": {}}}
    served: dict[str, Any] = {"kind": "Deployment", "metadata": {"name": "squid",
        "managedFields": [{"manager": names.FIELD_MANAGER, "operation": "Apply",
                           "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}}]},
        "spec": {"replicas": 3, "template": {}}}
    assert not drifted(desired, served)


def test_contains_is_a_subset_on_maps_and_exact_on_list_length() -> None:
    assert contains({"a": 1, "b": 2}, {"a": 1})
    assert not contains({"a": 1}, {"a": 1, "b": 2})
    assert contains([{"k": 1, "x": 0}], [{"k": 1}])
    assert not contains([{"k": 1}, {"k": 2}], [{"k": 1}])
    assert not contains("1", 1)


def test_objects_no_longer_rendered_are_pruned_nodepools_first() -> None:
    both = kwok_vc(POOLS["spot-compute"], POOLS["memory"])
    served = as_served(rendered(both))
    only_workers = kwok_vc(POOLS["spot-compute"])
    p = plan(observed(only_workers, owned=served))
    kinds = [r["kind"] for r in p.prune]
    assert kinds and kinds[0] == "NodePool" and "KWOKNodeClass" in kinds
    assert all("imaging" in r["name"] for r in p.prune)


def test_apply_errors_replan_without_writes_and_show_in_ready() -> None:
    obj = kwok_vc(POOLS["spot-compute"])
    first = observed(obj)
    assert plan(first).apply
    again = plan(replace(first, errors=("NodePool/x was refused by the API server (boom)",)))
    assert again.apply == [] and again.prune == []
    assert again.status is not None
    ready = next(c for c in again.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "refused by the API server (boom)" in ready["message"]
    assert any(e.type == "Warning" and e.reason == "NotReady" for e in again.events)


def test_aws_cluster_pools_ask_for_their_placement_group_first() -> None:
    obj = vc(POOLS["spot-compute"], POOLS["cluster-compute"], provider="aws")
    obj["metadata"]["finalizers"] = [names.FINALIZER_VIRTUAL_CLUSTER]
    p = plan(observed(obj, crds=AWS))
    assert p.ensure_groups == ("mpi",)


def test_conditions_take_their_time_from_observed_now() -> None:
    obj = kwok_vc(POOLS["spot-compute"])
    p = plan(observed(obj, owned=as_served(rendered(obj))))
    assert p.status is not None
    assert {c["lastTransitionTime"] for c in p.status["conditions"]} == {"2026-11-23T12:00:00Z"}
    # The same observation twice: the same plan (no clock inside).
    assert plan(observed(obj, owned=as_served(rendered(obj)))) == p


def test_deletion_waits_for_running_runs_and_says_how_to_force() -> None:
    obj = kwok_vc(POOLS["spot-compute"], deletionTimestamp="2026-11-23T11:00:00Z")
    p = plan(observed(obj, owned=as_served(rendered(obj)), running_runs=("night-1",)))
    assert p.apply == [] and p.prune == [] and not p.remove_finalizer
    assert p.status is not None
    deleting = next(c for c in p.status["conditions"] if c["type"] == DELETING)
    assert deleting["reason"] == "InUse" and "night-1" in deleting["message"]
    assert names.ANNOTATION_FORCE_DELETE in deleting["message"]


def test_deletion_steps_nodepools_then_nodes_then_classes_then_finalizer() -> None:
    obj = kwok_vc(POOLS["spot-compute"], deletionTimestamp="2026-11-23T11:00:00Z")
    served = as_served(rendered(obj))
    node = {"metadata": {"name": "n1", "labels": {
        names.LABEL_VIRTUAL_CLUSTER: "snfactory",
        names.LABEL_VIRTUAL_CLUSTER_NAMESPACE: "physics"}}}
    step1 = plan(observed(obj, owned=served, nodes=[node]))
    assert [r["kind"] for r in step1.prune] == ["NodePool"]
    assert not step1.remove_finalizer
    classes = [o for o in served if o["kind"] != "NodePool"]
    step2 = plan(observed(obj, owned=classes, nodes=[node]))
    assert step2.prune == [] and step2.status is not None
    assert "waiting for 1 node(s)" in next(
        c for c in step2.status["conditions"] if c["type"] == DELETING)["message"]
    step3 = plan(observed(obj, owned=classes))
    assert [r["kind"] for r in step3.prune] == ["KWOKNodeClass"]
    step4 = plan(observed(obj))
    assert step4.remove_finalizer and step4.gone


def test_static_nodes_do_not_hold_up_deletion() -> None:
    obj = kwok_vc(POOLS["spot-compute"], deletionTimestamp="2026-11-23T11:00:00Z")
    static = {"metadata": {"name": "s1", "labels": {names.LABEL_POOL: "workers"}}}
    assert plan(observed(obj, nodes=[static])).remove_finalizer


def test_a_placement_group_error_keeps_the_finalizer_with_the_message() -> None:
    obj = vc(POOLS["cluster-compute"], provider="aws")
    obj["metadata"].update(finalizers=[names.FINALIZER_VIRTUAL_CLUSTER],
                           deletionTimestamp="2026-11-23T11:00:00Z")
    first = plan(observed(obj, crds=AWS))
    assert first.delete_groups == ("mpi",) and first.remove_finalizer
    after = plan(observed(obj, crds=AWS, errors=("pool mpi: placement group g: in use",)))
    assert not after.remove_finalizer and not after.gone
    assert after.status is not None
    cond = next(c for c in after.status["conditions"] if c["type"] == DELETING)
    assert cond["reason"] == "PlacementGroupError" and "in use" in cond["message"]


def test_deleted_without_our_finalizer_is_gone() -> None:
    obj = kwok_vc(POOLS["spot-compute"], finalizer=False,
                  deletionTimestamp="2026-11-23T11:00:00Z")
    assert plan(observed(obj)).gone


def test_an_unreadable_spec_is_invalid_naming_the_field() -> None:
    obj = kwok_vc({**POOLS["spot-compute"], "bogus": 1})
    p = plan(observed(obj))
    assert p.apply == [] and p.status is not None
    invalid = next(c for c in p.status["conditions"] if c["type"] == "Invalid")
    assert invalid["status"] == "True" and invalid["message"].startswith("spec.pools[0].bogus")


def test_unpriced_nodes_say_why_until_they_are_priced() -> None:
    obj = kwok_vc(POOLS["spot-compute"])
    pool = obj["spec"]["pools"][0]["name"]
    launched = (NOW.replace(minute=0) if NOW.minute else NOW).isoformat().replace("+00:00", "Z")
    node = {"metadata": {"name": "nc-1", "labels": {
        names.LABEL_POOL: pool, "node.kubernetes.io/instance-type": "c5.large",
        "karpenter.sh/capacity-type": "spot"}},
        "status": {"conditions": [{"type": "Launched", "status": "True",
                                   "lastTransitionTime": launched}]}}
    why = "no instance catalog: set NIGHTSHIFT_INSTANCE_CATALOG"
    p = plan(observed(obj, nodeclaims=[node], prices={("c5.large", "spot"): None},
                      price_problem=why))
    cost = (p.status or {})["cost"]
    assert (cost["unpricedNodes"], cost["unpricedReason"]) == (1, why)
    p = plan(observed(obj, nodeclaims=[node], prices={("c5.large", "spot"): 0.036}))
    assert "unpricedReason" not in (p.status or {})["cost"]


def test_objects_karpenter_never_judges_are_named_after_the_grace() -> None:
    """No Karpenter controller: the NodePool and node class never get Ready, and the
    VirtualCluster said Ready with pods waiting for nodes that never came."""
    obj = kwok_vc(POOLS["spot-compute"])
    served = as_served(render_virtualcluster(obj, "kwok", catalog=catalog()))

    def made(seconds_ago: float, status: dict[str, Any]) -> list[dict[str, Any]]:
        out = copy.deepcopy(served)
        for m in out:
            m["metadata"]["creationTimestamp"] = (
                NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
            m["status"] = copy.deepcopy(status)
        return out

    fresh = plan(observed(obj, owned=made(30, {})))
    assert fresh.status is not None and cond(fresh.status, "Ready")["status"] == "True"
    assert fresh.requeue_after is not None and fresh.requeue_after <= KARPENTER_GRACE / 4
    late = plan(observed(obj, owned=made(KARPENTER_GRACE + 1, {})))
    ready = cond(late.status or {}, "Ready")
    assert ready["status"] == "False", ready
    pool = next(m["metadata"]["name"] for m in served if m["kind"] == "NodePool")
    assert (f"NodePool {pool} has no Ready from Karpenter 2 minutes after it was made: is "
            "Karpenter's controller running") in ready["message"], ready
    assert "KWOKNodeClass " in ready["message"], ready
    waiting = plan(observed(obj, owned=made(KARPENTER_GRACE + 1, {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "AwaitingReconciliation",
         "message": "object is awaiting reconciliation"}]})))
    assert ("(Ready is Unknown: AwaitingReconciliation: object is awaiting reconciliation)"
            in cond(waiting.status or {}, "Ready")["message"])
    judged = plan(observed(obj, owned=made(KARPENTER_GRACE + 1, {"conditions": [
        {"type": "Ready", "status": "True"}]})))
    assert cond(judged.status or {}, "Ready")["status"] == "True"
    assert judged.requeue_after is None


def test_a_pool_removed_while_runs_use_it_is_kept_until_they_end() -> None:
    both = kwok_vc(POOLS["spot-compute"], POOLS["memory"])
    served = as_served(rendered(both))
    one = kwok_vc(POOLS["spot-compute"])
    gone = POOLS["memory"]["name"]
    assert removed_pools(VirtualClusterSpec.model_validate(one["spec"]), served) == [gone]
    p = plan(observed(one, owned=served, running_runs=("night-1", "night-2")))
    assert p.prune == [] and p.status is not None and p.requeue_after
    ready = cond(p.status, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "RemovedPoolsInUse"), ready
    assert ready["message"] == (
        f"pool {gone} removed from spec.pools is kept (NodePool, node class and nodes) while "
        "runs use this VirtualCluster: night-1, night-2; it goes once those end")
    # The runs ended: the pool's NodePool goes first, then its node class.
    p = plan(observed(one, owned=served))
    pruned = [(r["kind"], r["name"]) for r in p.prune]
    assert pruned and pruned[0][0] == "NodePool" and all(gone in n for _, n in pruned), pruned
    assert cond(p.status or {}, "Ready")["reason"] == "NodePoolsApplied"
