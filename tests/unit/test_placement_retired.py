"""A cluster pool's EC2 placement group outlives the pool's removal no more: the groups
made are recorded in status.placementGroups, and a pool that no longer asks for one
(removed, or placement no longer cluster) has its group deleted once no NodePool, node
class, NodeClaim or node of it is left; the entry goes when a pass sees the group gone.
The VirtualCluster's deletion deletes every recorded group. Before, only the current
spec's groups were ever deleted."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.stub import Stubber

from nightshift.api import names
from nightshift.aws.clients import Ec2Access
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.placement import existing_groups
from nightshift.virtualcluster.plan import BUSY_REQUEUE, plan
from tests.unit.test_vc_reconcile_placement import GROUP, existing, unknown
from tests.unit.test_vcplan import AWS, observed
from tests.unit.vcfixtures import POOLS, vc


def _vc(*pools: dict[str, Any], made: list[str] | None = None, **meta: Any) -> dict[str, Any]:
    obj = vc(*pools, provider="aws")
    obj["metadata"].update(finalizers=[names.FINALIZER_VIRTUAL_CLUSTER], **meta)
    if made is not None:
        obj["status"] = {"placementGroups": made}
    return obj


def _of_pool(kind: str, pool: str) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": kind, "metadata": {
        "name": f"{pool}-x", "labels": {
        names.LABEL_POOL: pool, names.LABEL_VIRTUAL_CLUSTER: "snfactory",
            names.LABEL_VIRTUAL_CLUSTER_NAMESPACE: "physics"}}}


def test_the_groups_made_are_recorded() -> None:
    p = plan(observed(_vc(POOLS["spot-compute"], POOLS["cluster-compute"]), crds=AWS))
    assert p.ensure_groups == ("mpi",) and p.status is not None
    assert p.status["placementGroups"] == ["mpi"]


def test_a_removed_pools_group_goes_once_its_nodes_are_gone() -> None:
    obj = _vc(POOLS["spot-compute"], made=["mpi"])
    for left in (_of_pool("NodePool", "mpi"), _of_pool("NodeClaim", "mpi"),
                 _of_pool("Node", "mpi")):
        o = observed(obj, crds=AWS, groups_left=frozenset({"mpi"}),
                     owned=[left] if left["kind"] == "NodePool" else [],
                     nodeclaims=[left] if left["kind"] == "NodeClaim" else [],
                     nodes=[left] if left["kind"] == "Node" else [])
        p = plan(o)
        assert p.delete_groups == (), left["kind"]
        assert p.status is not None and p.status["placementGroups"] == ["mpi"]
        assert p.requeue_after == BUSY_REQUEUE
    p = plan(observed(obj, crds=AWS, groups_left=frozenset({"mpi"})))
    assert p.delete_groups == ("mpi",)
    assert p.status is not None and p.status["placementGroups"] == ["mpi"]
    # The next pass sees it gone: the record goes.
    p = plan(observed(obj, crds=AWS))
    assert p.delete_groups == () and p.status is not None
    assert "placementGroups" not in p.status


def test_deletion_deletes_every_recorded_group() -> None:
    obj = _vc(POOLS["spot-compute"], made=["mpi", "old"],
              deletionTimestamp="2026-11-23T11:00:00Z")
    p = plan(observed(obj, crds=AWS))
    assert p.delete_groups == ("mpi", "old") and p.remove_finalizer


def test_a_group_that_cannot_be_looked_up_is_kept() -> None:
    obj = _vc(POOLS["cluster-compute"])
    mpi = GROUP  # tests/unit/test_vc_reconcile_placement's group of pool "mpi"
    assert mpi == vcnames.placement_group_name("physics", "snfactory", "mpi")
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="t",
                       aws_secret_access_key="t")
    stub = Stubber(ec2)
    existing(stub)
    unknown(stub)
    stub.add_client_error("describe_placement_groups", "RequestLimitExceeded", "slow down")
    with stub:
        aws = Ec2Access(lambda: ec2)
        assert existing_groups(aws, obj, ["mpi"]) == {"mpi"}
        assert existing_groups(aws, obj, ["mpi"]) == set()
        assert existing_groups(aws, obj, ["mpi"]) == {"mpi"}
    stub.assert_no_pending_responses()
