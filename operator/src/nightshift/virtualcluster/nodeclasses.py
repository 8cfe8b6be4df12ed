"""Node classes: karpenter.k8s.aws/v1 EC2NodeClass on AWS, KWOKNodeClass locally."""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.spec import DEFAULT_AMI_ALIAS, NodeClass, Pool

EC2_API = "karpenter.k8s.aws/v1"
KWOK_API = "karpenter.kwok.sh/v1alpha1"


def metadata(namespace: str, vc: str, pool: str, component: str) -> dict[str, str]:
    """Labels on every cluster-scoped object of a VirtualCluster: the reconciler finds
    (and on deletion removes) them by nightshift.io/virtual-cluster + namespace."""
    return {
        names.LABEL_NAME: "nightshift",
        names.LABEL_INSTANCE: vc,
        names.LABEL_COMPONENT: component,
        names.LABEL_PART_OF: "nightshift",
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_VIRTUAL_CLUSTER: vc,
        vcnames.LABEL_VC_NAMESPACE: namespace,
        names.LABEL_POOL: pool,
    }


def ownership_tags(namespace: str, vc: str, pool: str) -> dict[str, str]:
    """EC2 tags naming the owner, so a leaked instance or placement group is traceable."""
    return {
        vcnames.TAG_MANAGED_BY: names.MANAGED_BY,
        vcnames.TAG_NAMESPACE: namespace,
        vcnames.TAG_VIRTUAL_CLUSTER: vc,
        vcnames.TAG_POOL: pool,
    }


def ec2_nodeclass(
    namespace: str, vc: str, name: str, pool: Pool, nc: NodeClass
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    # role xor instanceProfile is the EC2NodeClass's own rule; vcvalidate reports a
    # missing one before we get here, so none is rendered rather than a guess.
    if nc.role:
        spec["role"] = nc.role
    elif nc.instance_profile:
        spec["instanceProfile"] = nc.instance_profile
    spec["subnetSelectorTerms"] = [
        t.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
        for t in nc.subnet_selector_terms
    ]
    spec["securityGroupSelectorTerms"] = [
        t.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
        for t in nc.security_group_selector_terms
    ]
    if nc.ami_selector_terms:
        spec["amiSelectorTerms"] = [
            t.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
            for t in nc.ami_selector_terms
        ]
        if nc.ami_family:
            spec["amiFamily"] = nc.ami_family
    else:
        spec["amiSelectorTerms"] = [{"alias": nc.ami_alias or DEFAULT_AMI_ALIAS}]
    # Ours last: a user tag cannot disown the resources.
    spec["tags"] = {**nc.tags, **ownership_tags(namespace, vc, pool.name)}
    if nc.block_device_mappings:
        spec["blockDeviceMappings"] = [
            b.model_dump(by_alias=True, exclude_none=True) for b in nc.block_device_mappings
        ]
    if pool.local_disk == "raid0":
        spec["instanceStorePolicy"] = "RAID0"
    if pool.placement == "cluster":
        # The group itself is created by nightshift.aws.placement before this applies.
        spec["placementGroupSelector"] = {
            "name": vcnames.placement_group_name(namespace, vc, pool.name)
        }
    return {
        "apiVersion": EC2_API,
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "labels": metadata(namespace, vc, pool.name, "nodeclass")},
        "spec": spec,
    }


def kwok_nodeclass(
    namespace: str, vc: str, name: str, pool: Pool, nc: NodeClass
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if nc.kwok and nc.kwok.node_registration_delay:
        spec["nodeRegistrationDelay"] = nc.kwok.node_registration_delay
    return {
        "apiVersion": KWOK_API,
        "kind": "KWOKNodeClass",
        "metadata": {"name": name, "labels": metadata(namespace, vc, pool.name, "nodeclass")},
        "spec": spec,
    }
