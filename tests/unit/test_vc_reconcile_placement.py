"""The reconciler's placement-group steps and its pure helpers.

moto (5.2.x) lacks EC2 placement groups, so, as in test_placement.py, botocore's
Stubber on a real EC2 client: requests are checked against EC2's service model. A call
the test did not expect fails the test (the Stubber has no response for it).
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import NoRegionError
from botocore.stub import Stubber

from nightshift.api.events import Event, condition_events
from nightshift.aws.clients import Ec2Access
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster import observe as vcobserve
from nightshift.virtualcluster import placement
from nightshift.virtualcluster.plan import blocked, not_ready_messages, placement_pools
from nightshift.virtualcluster.spec import VirtualClusterSpec
from tests.unit.vcfixtures import POOLS, vc

UID = "uid-1"  # vcfixtures.vc's metadata.uid
GROUP = vcnames.placement_group_name("physics", "snfactory", "mpi")


def ensure_placement_groups(factory: Any, obj: dict[str, Any],
                            spec: VirtualClusterSpec) -> list[str]:
    return placement.ensure_groups(Ec2Access(factory), obj, placement_pools(spec))


def delete_placement_groups(factory: Any, obj: dict[str, Any],
                            spec: VirtualClusterSpec) -> list[str]:
    return placement.delete_groups(Ec2Access(factory), obj, placement_pools(spec))


def body(*pools: dict[str, Any]) -> tuple[dict[str, Any], VirtualClusterSpec]:
    obj = vc(*pools)
    return obj, VirtualClusterSpec.model_validate(obj["spec"])


def unknown(stub: Stubber) -> None:
    stub.add_client_error("describe_placement_groups", "InvalidPlacementGroup.Unknown",
                          f"The Placement Group '{GROUP}' is unknown.",
                          expected_params={"GroupNames": [GROUP]})


def existing(stub: Stubber, owner: str = UID) -> None:
    stub.add_response("describe_placement_groups", {"PlacementGroups": [{
        "GroupName": GROUP, "GroupId": "pg-0123", "State": "available", "Strategy": "cluster",
        "Tags": [{"Key": vcnames.TAG_OWNER_UID, "Value": owner}]}]},
        expected_params={"GroupNames": [GROUP]})


def test_only_cluster_pools_get_a_group_created_with_owner_tags(
        ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    obj, spec = body(POOLS["spot-compute"], POOLS["cluster-compute"])
    unknown(stub)
    tags = {"app.kubernetes.io/managed-by": "nightshift", "nightshift.io/namespace": "physics",
            "nightshift.io/virtual-cluster": "snfactory", "nightshift.io/pool": "mpi",
            vcnames.TAG_OWNER_UID: UID}
    stub.add_response(
        "create_placement_group",
        {"PlacementGroup": {"GroupName": GROUP, "GroupId": "pg-0123", "State": "pending"}},
        expected_params={"GroupName": GROUP, "Strategy": "cluster", "TagSpecifications": [
            {"ResourceType": "placement-group",
             "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}]})
    assert ensure_placement_groups(lambda: client, obj, spec) == []


def test_second_pass_finds_its_own_group_and_creates_nothing(
        ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    obj, spec = body(POOLS["cluster-compute"])
    existing(stub)
    assert ensure_placement_groups(lambda: client, obj, spec) == []


def test_no_placement_pool_means_no_aws_call() -> None:
    obj, spec = body(POOLS["spot-compute"], POOLS["memory"])

    def no_client() -> Any:
        raise AssertionError("EC2 client built for a VirtualCluster without placement")

    assert ensure_placement_groups(no_client, obj, spec) == []
    assert delete_placement_groups(no_client, obj, spec) == []


def test_aws_refusal_becomes_a_message_with_the_fix(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    obj, spec = body(POOLS["cluster-compute"])
    unknown(stub)
    stub.add_client_error("create_placement_group", "UnauthorizedOperation",
                          "You are not authorized to perform this operation.")
    [msg] = ensure_placement_groups(lambda: client, obj, spec)
    assert msg.startswith(f"pool mpi: placement group {GROUP}: AWS CreatePlacementGroup")
    assert "UnauthorizedOperation: You are not authorized" in msg
    assert "ec2:CreatePlacementGroup" in msg


def test_a_strangers_group_is_never_adopted(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    obj, spec = body(POOLS["cluster-compute"])
    existing(stub, owner="someone-else")
    [msg] = ensure_placement_groups(lambda: client, obj, spec)
    assert "NightshiftOwnerConflict" in msg and "someone-else" in msg and UID in msg


def test_missing_region_is_a_message_not_a_crash() -> None:
    obj, spec = body(POOLS["cluster-compute"])

    def no_region() -> Any:
        raise NoRegionError()

    [msg] = ensure_placement_groups(no_region, obj, spec)
    assert "AWS_REGION" in msg
    [msg] = delete_placement_groups(no_region, obj, spec)
    assert "AWS_REGION" in msg


def test_finalizer_deletes_our_group(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    obj, spec = body(POOLS["cluster-compute"])
    existing(stub)
    stub.add_response("delete_placement_group", {}, expected_params={"GroupName": GROUP})
    assert delete_placement_groups(lambda: client, obj, spec) == []


def test_finalizer_is_done_when_the_group_is_already_gone(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    obj, spec = body(POOLS["cluster-compute"])
    unknown(stub)
    assert delete_placement_groups(lambda: client, obj, spec) == []


def test_group_in_use_keeps_the_finalizer_with_the_aws_message(
        ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    obj, spec = body(POOLS["cluster-compute"])
    existing(stub)
    stub.add_client_error("delete_placement_group", "InvalidPlacementGroup.InUse",
                          f"The placement group '{GROUP}' is in use and may not be deleted.")
    [msg] = delete_placement_groups(lambda: client, obj, spec)
    assert "DeletePlacementGroup failed: InvalidPlacementGroup.InUse" in msg


def test_blocked_message_names_runs_and_the_force_annotation() -> None:
    reason, msg = blocked("physics", "snfactory", ["night-1", "night-2"])
    assert reason == "InUse"
    assert "night-1, night-2" in msg
    assert "kubectl annotate virtualcluster -n physics snfactory " \
           "nightshift.io/force-delete=true" in msg
    _, many = blocked("physics", "snfactory", [f"r{i}" for i in range(12)])
    assert "and 2 more" in many


def test_events_only_for_transitions() -> None:
    old = [{"type": "Ready", "status": "True", "reason": "NodePoolsApplied", "message": ""}]
    same = [{"type": "Ready", "status": "True", "reason": "NodePoolsApplied", "message": "x"}]
    assert condition_events(old, same) == []
    down = [{"type": "Ready", "status": "False", "reason": "NotReady", "message": "why"}]
    assert condition_events(old, down) == [Event("Warning", "NotReady", "Ready=False: why")]
    # A new object's quiet "no problem" conditions are not news; Ready is.
    fresh = [*same, {"type": "Invalid", "status": "False", "reason": "Valid", "message": ""}]
    assert condition_events(None, fresh) == [Event("Normal", "NodePoolsApplied", "Ready=True: x")]


def test_pod_cpu_counts_sidecars_with_containers_and_inits_one_at_a_time() -> None:
    def c(cpu: str, always: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"resources": {"requests": {"cpu": cpu}}}
        if always:
            out["restartPolicy"] = "Always"
        return out

    spec = {"containers": [c("2"), c("500m")], "initContainers": [c("4"), c("250m", True)]}
    # max(2.5 + 0.25 running, 4 + 0.25 for the first init) = 4.25
    assert vcobserve.pod_cpu(spec) == pytest.approx(4.25)
    assert vcobserve.pod_cpu({"containers": [{"name": "no-requests"}]}) == 0


def test_not_ready_quotes_karpenters_message() -> None:
    objs = [
        {"kind": "NodePool", "metadata": {"name": "a"}, "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "NodeClassNotReady",
             "message": "NodeClass not found"}]}},
        {"kind": "NodePool", "metadata": {"name": "b"}, "status": {"conditions": [
            {"type": "Ready", "status": "Unknown"}]}},
    ]
    assert not_ready_messages(objs) == [
        "NodePool a is not ready (NodeClassNotReady: NodeClass not found)"]


def test_not_ready_quotes_the_failing_condition_karpenter_computed_ready_from() -> None:
    # Karpenter's Ready only lists the failing dependents; their own conditions say why
    # (karpenter-provider-aws nodeclass/subnet.go; operatorpkg's root condition).
    objs = [{"kind": "EC2NodeClass", "metadata": {"name": "physics-general"},
             "status": {"conditions": [
                 {"type": "SubnetsReady", "status": "False", "reason": "SubnetsNotFound",
                  "message": "SubnetSelector did not match any Subnets"},
                 {"type": "SecurityGroupsReady", "status": "True", "reason": "Ready"},
                 {"type": "ValidationSucceeded", "status": "False",
                  "reason": "TagValidationFailed", "message": "tag key is restricted"},
                 {"type": "Ready", "status": "False", "reason": "UnhealthyDependents",
                  "message": "SubnetsReady=False, ValidationSucceeded=False"}]}}]
    assert not_ready_messages(objs) == [
        "EC2NodeClass physics-general is not ready (SubnetsReady: SubnetsNotFound: "
        "SubnetSelector did not match any Subnets; check spec.nodeClass.subnetSelectorTerms; "
        "ValidationSucceeded: TagValidationFailed: tag key is restricted)"]
