from __future__ import annotations

from typing import Any

from nightshift.api import conditions, names
from nightshift.api.problems import Problem
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.provider import CRD_KWOKNODECLASS, CRD_NODEPOOL, detect_provider
from nightshift.virtualcluster.status import usage_by_nodepool, virtualcluster_status
from tests.unit.vcfixtures import POOLS, catalog, vc

KWOK = detect_provider({CRD_NODEPOOL, CRD_KWOKNODECLASS})
STATIC = detect_provider(set())
NOW = "2025-01-01T00:00:00Z"


def node(name: str, pool: str, itype: str, cap: str, cpu: str = "7910m",
         vc_name: str | None = "snfactory") -> dict[str, Any]:
    labels = {names.LABEL_POOL: pool, "node.kubernetes.io/instance-type": itype,
              "karpenter.sh/capacity-type": cap}
    if vc_name:
        labels[names.LABEL_VIRTUAL_CLUSTER] = vc_name
        labels[vcnames.LABEL_VC_NAMESPACE] = "physics"
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": "15Gi"},
                       "capacity": {"cpu": "8", "memory": "16Gi"}}}


def claim(pool: str, cpu: str, node_name: str | None = None, np: str = "np-a") -> dict[str, Any]:
    c: dict[str, Any] = {"metadata": {"labels": {names.LABEL_POOL: pool,
                                                  "karpenter.sh/nodepool": np}},
                         "spec": {"resources": {"requests": {"cpu": cpu}}}, "status": {}}
    if node_name:
        c["status"] = {"nodeName": node_name, "capacity": {"cpu": "8", "memory": "16Gi"}}
    return c


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found = conditions.find(status["conditions"], type_)
    assert found is not None
    return dict(found)


def test_per_pool_figures_and_cost() -> None:
    nodes = [node("n1", "workers", "c6i.2xlarge", "spot"),
             node("n2", "workers", "c6i.2xlarge", "on-demand"),
             node("n3", "imaging", "r6i.large", "on-demand")]
    st = virtualcluster_status(vc(POOLS["spot-compute"], POOLS["memory"]), choice=KWOK,
                               nodes=nodes, price=catalog().price, now=NOW)
    workers, imaging = st["pools"]
    assert workers["nodes"] == 2 and workers["cpu"] == 15.82
    assert workers["instanceTypes"] == ["c6i.2xlarge"]
    assert workers["capacityTypes"] == ["on-demand", "spot"]
    assert workers["hourlyUSD"] == round(0.238 + 0.34, 4)
    assert imaging["memory"] == "15Gi"
    assert st["nodes"] == 3 and st["hourlyUSD"] == round(0.238 + 0.34 + 0.126, 4)
    # kubectl's columns: both pools, not the first.
    assert st["poolCount"] == 2 and st["poolSummary"] == "workers=2 imaging=1"
    assert (st["provider"], st["mode"], st["observedGeneration"]) == ("kwok", "karpenter", 3)
    assert cond(st, "Ready")["status"] == "True"
    assert cond(st, "CapacityLimited")["status"] == "False"
    assert cond(st, "Invalid")["status"] == "False"


def test_pending_cpu_served_by_launching_claims_is_not_limited() -> None:
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=[],
                               nodeclaims=[claim("workers", "6")],
                               pending_cpu={"workers": 6.0}, now=NOW)
    assert st["pools"][0]["pendingCPU"] == 0 and st["pools"][0]["launching"] == 1
    assert st["poolSummary"] == "workers=0+1"
    assert cond(st, "CapacityLimited")["status"] == "False"


def test_unserved_pending_cpu_is_capacity_limited() -> None:
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=[],
                               nodeclaims=[claim("workers", "4")],
                               pending_cpu={"workers": 10.0}, now=NOW)
    assert st["pools"][0]["pendingCPU"] == 6
    c = cond(st, "CapacityLimited")
    assert c["status"] == "True" and "workers: 6 CPU requested by pending pods" in c["message"]


def test_pool_at_its_limit() -> None:
    nodes = [node(f"n{i}", "workers", "c6i.2xlarge", "spot") for i in range(8)]
    claims = [claim("workers", "8", f"n{i}") for i in range(8)]
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=nodes,
                               nodeclaims=claims, now=NOW)
    assert st["pools"][0]["launching"] == 0
    assert "at its limit maxCPU 64" in cond(st, "CapacityLimited")["message"]


def test_invalid_and_provider_errors_make_not_ready() -> None:
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=[],
                               problems=[Problem("spec.pools[0].maxCPU", "must be > 0")],
                               now=NOW)
    assert cond(st, "Invalid")["message"] == "spec.pools[0].maxCPU: must be > 0"
    assert cond(st, "Ready")["reason"] == "Invalid"
    missing = detect_provider(set(), "aws")
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=missing, nodes=[], now=NOW)
    assert cond(st, "Ready")["reason"] == "ProviderUnavailable"
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=[],
                               not_ready=["placement group: UnauthorizedOperation: denied"],
                               now=NOW)
    assert "UnauthorizedOperation" in cond(st, "Ready")["message"]


def test_static_mode_needs_labeled_nodes() -> None:
    v = vc(POOLS["spot-compute"], POOLS["memory"])
    st = virtualcluster_status(v, choice=STATIC,
                               nodes=[node("a", "workers", "x", "on-demand", vc_name=None)],
                               now=NOW)
    ready = cond(st, "Ready")
    assert ready["status"] == "False" and "imaging" in ready["message"]
    assert "workers" not in ready["message"].split("pool(s)")[1].split(":")[0]
    assert st["pools"][0]["nodes"] == 1 and st["mode"] == "static"


def test_other_virtualclusters_nodes_are_ignored() -> None:
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK,
                               nodes=[node("x", "workers", "c6i.large", "spot", vc_name="other")],
                               now=NOW)
    assert st["pools"][0]["nodes"] == 0


def test_transition_time_kept_when_nothing_changed() -> None:
    v = vc(POOLS["spot-compute"])
    first = virtualcluster_status(v, choice=KWOK, nodes=[], now=NOW)
    again = virtualcluster_status({**v, "status": first}, choice=KWOK, nodes=[],
                                  now="2025-01-02T00:00:00Z")
    assert again == first


def test_usage_by_nodepool() -> None:
    usage = usage_by_nodepool([claim("w", "2", np="a"), claim("w", "3", "n1", np="a"),
                               claim("w", "1", np="b")])
    assert usage["a"].cpu == 2 + 8 and usage["a"].nodes == 2 and usage["b"].cpu == 1


def with_conditions(c: dict[str, Any], name: str, *conds: dict[str, Any]) -> dict[str, Any]:
    c["metadata"]["name"] = name
    c["status"]["conditions"] = list(conds)
    return c


def test_a_launch_karpenter_could_not_make_is_named() -> None:
    failed = with_conditions(claim("workers", "4"), "workers-x7k2", {
        "type": "Launched", "status": "Unknown", "reason": "LaunchFailed",
        "message": "creating instance, UnauthorizedOperation: not authorized to perform "
                   "ec2:RunInstances"})
    waiting = with_conditions(claim("workers", "4"), "workers-q9", {
        "type": "Launched", "status": "Unknown", "reason": "AwaitingReconciliation",
        "message": "object is awaiting reconciliation"})
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=[],
                               nodeclaims=[failed, waiting], pending_cpu={"workers": 8.0},
                               now=NOW)
    c = cond(st, "CapacityLimited")
    assert c["status"] == "True"
    assert ("NodeClaim workers-x7k2: LaunchFailed: creating instance, UnauthorizedOperation: "
            "not authorized to perform ec2:RunInstances") in c["message"]
    assert "workers-q9" not in c["message"]  # merely new


def test_an_instance_that_never_joins_is_named_after_five_minutes() -> None:
    def launched(at: str) -> dict[str, Any]:
        return with_conditions(claim("workers", "4"), "workers-z1", {
            "type": "Launched", "status": "True", "reason": "Launched",
            "lastTransitionTime": at}, {
            "type": "Registered", "status": "Unknown", "reason": "NodeNotFound",
            "message": "Node not registered with cluster"})

    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=[],
                               nodeclaims=[launched("2024-12-31T23:58:00Z")], now=NOW)
    assert cond(st, "CapacityLimited")["status"] == "False"  # 2 min: still booting
    st = virtualcluster_status(vc(POOLS["spot-compute"]), choice=KWOK, nodes=[],
                               nodeclaims=[launched("2024-12-31T23:52:00Z")], now=NOW)
    c = cond(st, "CapacityLimited")
    assert c["status"] == "True"
    assert ("NodeClaim workers-z1 launched 8 min ago but no node registered (Node not "
            "registered with cluster): check that the node role may join the cluster (an EKS "
            "access entry of type EC2_LINUX, or aws-auth)") in c["message"]


def test_applied_generation_is_the_last_valid_one() -> None:
    obj = vc(POOLS["spot-compute"])
    st = virtualcluster_status(obj, choice=KWOK, nodes=[], now=NOW)
    assert st["appliedGeneration"] == obj["metadata"]["generation"]
    obj["status"] = st
    obj["metadata"]["generation"] += 1
    bad = virtualcluster_status(obj, choice=KWOK, nodes=[], now=NOW,
                                problems=[Problem("spec.pools[0].maxCPU", "bad")])
    assert bad["appliedGeneration"] == st["appliedGeneration"]  # the earlier one stands
    fresh = vc(POOLS["spot-compute"])
    assert "appliedGeneration" not in virtualcluster_status(
        fresh, choice=KWOK, nodes=[], now=NOW, problems=[Problem("spec", "bad")])
