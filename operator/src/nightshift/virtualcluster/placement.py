"""The EC2 placement-group steps of a VirtualCluster pass (I/O through aws/): errors
come back as sentences naming the pool, the group and the fix, for the status."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nightshift.aws import AwsError
from nightshift.aws.clients import Ec2Access
from nightshift.aws.placement import (
    delete_placement_group,
    describe_placement_group,
    ensure_placement_group,
)
from nightshift.virtualcluster import objectnames
from nightshift.virtualcluster.nodeclasses import ownership_tags


def ensure_groups(aws: Ec2Access, vc: Mapping[str, Any], pools: Iterable[str]) -> list[str]:
    """Create (or accept as ours) each cluster pool's placement group before its
    EC2NodeClass names it."""
    return _each(aws, vc, pools, "CreatePlacementGroup", ensure_placement_group)


def delete_groups(aws: Ec2Access, vc: Mapping[str, Any], pools: Iterable[str]) -> list[str]:
    """Delete our placement groups (only once the pools' nodes are gone)."""
    return _each(aws, vc, pools, "DeletePlacementGroup", lambda client, group, uid, _tags:
                 delete_placement_group(client, group, uid))


def existing_groups(aws: Ec2Access, vc: Mapping[str, Any], pools: Iterable[str]) -> set[str]:
    """Of `pools`, those whose placement group still exists. One that cannot be looked
    up (no client, an AWS error) counts as existing: its record is kept, never lost."""
    pools = list(pools)
    if not pools:
        return set()
    meta = vc["metadata"]
    try:
        client = aws.client()
    except AwsError:
        return set(pools)
    out = set()
    for pool in pools:
        try:
            if describe_placement_group(client, objectnames.placement_group_name(
                    meta["namespace"], meta["name"], pool)) is not None:
                out.add(pool)
        except AwsError:
            out.add(pool)
    return out


def _each(aws: Ec2Access, vc: Mapping[str, Any], pools: Iterable[str], operation: str,
          step: Any) -> list[str]:
    pools = list(pools)
    if not pools:
        return []
    meta = vc["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], str(meta.get("uid", ""))
    try:
        client = aws.client()
    except AwsError as e:
        return [aws_message(operation, e.code, e.message)]
    out = []
    for pool in pools:
        group = objectnames.placement_group_name(namespace, name, pool)
        try:
            step(client, group, uid, ownership_tags(namespace, name, pool))
        except AwsError as e:
            out.append(f"pool {pool}: placement group {group}: "
                       + aws_message(e.operation, e.code, e.message))
    return out


def aws_message(operation: str, code: str, message: str) -> str:
    hint = ""
    if code in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
        hint = (": give the operator's IAM role ec2:CreatePlacementGroup, "
                "ec2:DescribePlacementGroups, ec2:DeletePlacementGroup and ec2:CreateTags")
    elif code == "NoClient":
        hint = ": set AWS_REGION and the operator's AWS credentials (IRSA or Pod Identity)"
    return f"AWS {operation} failed: {code}: {message}{hint}"
