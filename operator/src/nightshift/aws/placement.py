"""EC2 cluster placement groups for cluster-compute pools.

The group's name is deterministic (nightshift.virtualcluster.objectnames.placement_group_name) so
that the EC2NodeClass can name it before it exists and every reconcile pass finds the
same one. The owner's UID in a tag tells our group from a same-named stranger's: a
VirtualCluster deleted and recreated under the same name gets a new UID and must not
silently adopt (or delete) the old one's group while instances still run in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from nightshift.aws import AwsError, aws_errors
from nightshift.virtualcluster import objectnames as vcnames

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

NOT_FOUND = "InvalidPlacementGroup.Unknown"
OWNER_CONFLICT = "NightshiftOwnerConflict"


@dataclass(frozen=True)
class PlacementGroup:
    name: str
    group_id: str
    state: str
    tags: Mapping[str, str]


def _describe(ec2: EC2Client, name: str) -> PlacementGroup | None:
    try:
        resp = ec2.describe_placement_groups(GroupNames=[name])
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == NOT_FOUND:
            return None
        raise
    for g in resp.get("PlacementGroups", []):
        # A deleted group lingers in "deleted" state for a while; it is gone for us.
        if g.get("GroupName") == name and g.get("State") != "deleted":
            return PlacementGroup(
                name=name,
                group_id=str(g.get("GroupId", "")),
                state=str(g.get("State", "")),
                tags={t["Key"]: t["Value"] for t in g.get("Tags", [])},
            )
    return None


def describe_placement_group(ec2: EC2Client, name: str) -> PlacementGroup | None:
    with aws_errors("DescribePlacementGroups"):
        return _describe(ec2, name)


def ensure_placement_group(
    ec2: EC2Client, name: str, owner_uid: str, tags: Mapping[str, str]
) -> PlacementGroup:
    """Create the cluster-strategy group, or accept it when it is already ours.

    Raises AwsError (code NightshiftOwnerConflict) when a group of that name belongs
    to another owner, and for any AWS failure.
    """
    existing = describe_placement_group(ec2, name)
    if existing is not None:
        _check_owner(existing, owner_uid)
        return existing
    all_tags = {**tags, vcnames.TAG_OWNER_UID: owner_uid}
    with aws_errors("CreatePlacementGroup"):
        try:
            resp = ec2.create_placement_group(
                GroupName=name,
                Strategy="cluster",
                TagSpecifications=[
                    {
                        "ResourceType": "placement-group",
                        "Tags": [{"Key": k, "Value": v} for k, v in sorted(all_tags.items())],
                    }
                ],
            )
        except ClientError as e:
            # Another reconcile pass (or operator replica) won the race: re-check owner.
            if e.response.get("Error", {}).get("Code") != "InvalidPlacementGroup.Duplicate":
                raise
            raced = _describe(ec2, name)
            if raced is None:
                raise
            _check_owner(raced, owner_uid)
            return raced
    g: Mapping[str, Any] = resp.get("PlacementGroup", {})
    return PlacementGroup(
        name=name,
        group_id=str(g.get("GroupId", "")),
        state=str(g.get("State", "pending")),
        tags=all_tags,
    )


def delete_placement_group(ec2: EC2Client, name: str, owner_uid: str) -> bool:
    """Delete our group; False when it is already gone.

    EC2 refuses while instances run in it (InvalidPlacementGroup.InUse): the finalizer
    calls this only once the pool's nodes are gone and retries on AwsError.
    """
    existing = describe_placement_group(ec2, name)
    if existing is None:
        return False
    _check_owner(existing, owner_uid)
    with aws_errors("DeletePlacementGroup"):
        try:
            ec2.delete_placement_group(GroupName=name)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == NOT_FOUND:
                return False
            raise
    return True


def _check_owner(group: PlacementGroup, owner_uid: str) -> None:
    found = group.tags.get(vcnames.TAG_OWNER_UID)
    if found != owner_uid:
        raise AwsError(
            "PlacementGroupOwner",
            OWNER_CONFLICT,
            f"placement group {group.name} ({group.group_id}) is tagged "
            f"{vcnames.TAG_OWNER_UID}={found or '<none>'}, not this VirtualCluster's "
            f"UID {owner_uid}: delete or re-tag the old group, or rename the pool",
        )
