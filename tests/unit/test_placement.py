"""Placement-group lifecycle.

moto (5.2.x) does not implement EC2 placement groups (create_placement_group raises
NotImplementedError), so these tests use botocore's Stubber on a real EC2 client:
every request is still checked against EC2's service model, and the responses are
the shapes EC2 returns.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber

from nightshift.aws import AwsError
from nightshift.aws.placement import (
    OWNER_CONFLICT,
    delete_placement_group,
    ensure_placement_group,
)
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.nodeclasses import ownership_tags

NAME = vcnames.placement_group_name("physics", "snfactory", "mpi")
UID = "0b6c1f7e-uid"
TAGS = ownership_tags("physics", "snfactory", "mpi")


def group(owner: str = UID, state: str = "available") -> dict[str, Any]:
    return {"GroupName": NAME, "GroupId": "pg-0123abcd", "State": state, "Strategy": "cluster",
            "Tags": [{"Key": vcnames.TAG_OWNER_UID, "Value": owner}]}


def absent(stub: Stubber) -> None:
    stub.add_client_error("describe_placement_groups", "InvalidPlacementGroup.Unknown",
                          f"The Placement Group '{NAME}' is unknown.",
                          expected_params={"GroupNames": [NAME]})


def test_create_with_owner_and_tags(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    absent(stub)
    tags = sorted({**TAGS, vcnames.TAG_OWNER_UID: UID}.items())
    stub.add_response(
        "create_placement_group",
        {"PlacementGroup": {"GroupName": NAME, "GroupId": "pg-0123abcd", "State": "pending"}},
        expected_params={
            "GroupName": NAME, "Strategy": "cluster",
            "TagSpecifications": [{"ResourceType": "placement-group",
                                   "Tags": [{"Key": k, "Value": v} for k, v in tags]}],
        },
    )
    pg = ensure_placement_group(client, NAME, UID, TAGS)
    assert pg.group_id == "pg-0123abcd" and pg.tags[vcnames.TAG_OWNER_UID] == UID
    assert pg.tags[vcnames.TAG_NAMESPACE] == "physics"


def test_create_is_idempotent(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_placement_groups", {"PlacementGroups": [group()]},
                      {"GroupNames": [NAME]})
    # No create call is stubbed: a second one would fail the test.
    assert ensure_placement_group(client, NAME, UID, TAGS).state == "available"


def test_other_owner_is_an_error(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_placement_groups", {"PlacementGroups": [group("someone")]},
                      {"GroupNames": [NAME]})
    with pytest.raises(AwsError) as err:
        ensure_placement_group(client, NAME, UID, TAGS)
    assert err.value.code == OWNER_CONFLICT and "someone" in err.value.message


def test_aws_error_is_typed(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    absent(stub)
    stub.add_client_error("create_placement_group", "UnauthorizedOperation",
                          "You are not authorized to perform this operation.")
    with pytest.raises(AwsError) as err:
        ensure_placement_group(client, NAME, UID, TAGS)
    assert err.value.code == "UnauthorizedOperation"
    assert err.value.operation == "CreatePlacementGroup"
    assert "not authorized" in str(err.value)


def test_delete_and_delete_absent(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_placement_groups", {"PlacementGroups": [group()]},
                      {"GroupNames": [NAME]})
    stub.add_response("delete_placement_group", {}, {"GroupName": NAME})
    assert delete_placement_group(client, NAME, UID) is True
    absent(stub)
    assert delete_placement_group(client, NAME, UID) is False
    stub.add_response("describe_placement_groups",
                      {"PlacementGroups": [group(state="deleted")]}, {"GroupNames": [NAME]})
    assert delete_placement_group(client, NAME, UID) is False


def test_delete_in_use_is_typed(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_placement_groups", {"PlacementGroups": [group()]},
                      {"GroupNames": [NAME]})
    stub.add_client_error("delete_placement_group", "InvalidPlacementGroup.InUse",
                          "The placement group is in use.")
    with pytest.raises(AwsError) as err:
        delete_placement_group(client, NAME, UID)
    assert err.value.code == "InvalidPlacementGroup.InUse"


def test_never_deletes_another_owners_group(ec2: tuple[Any, Stubber]) -> None:
    client, stub = ec2
    stub.add_response("describe_placement_groups", {"PlacementGroups": [group("other")]},
                      {"GroupNames": [NAME]})
    with pytest.raises(AwsError):
        delete_placement_group(client, NAME, UID)


def test_name_is_deterministic_and_valid() -> None:
    assert vcnames.placement_group_name("physics", "snfactory", "mpi") == NAME
    assert NAME.startswith("nightshift-physics-snfactory-mpi-") and len(NAME) <= 255
    assert vcnames.placement_group_name("chem", "snfactory", "mpi") != NAME
