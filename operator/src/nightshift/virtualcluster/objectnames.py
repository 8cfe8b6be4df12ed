"""Deterministic names and extra keys for a VirtualCluster's cluster-scoped objects.

NodePools, node classes and EC2 placement groups are not namespaced while a
VirtualCluster is, so two namespaces may both hold a VirtualCluster "physics" with a
pool "workers". Every name therefore carries a short hash of namespace/vc/pool: the
readable part is for people, the hash is for uniqueness.
"""

from __future__ import annotations

import hashlib

from nightshift.api import names

# Not in api/names.py (owned elsewhere); candidates to move there.
LABEL_VC_NAMESPACE = names.LABEL_VIRTUAL_CLUSTER_NAMESPACE
LABEL_CAPACITY_HALF = f"{names.GROUP}/capacity"
TAG_NAMESPACE = f"{names.GROUP}/namespace"
TAG_VIRTUAL_CLUSTER = names.LABEL_VIRTUAL_CLUSTER
TAG_POOL = names.LABEL_POOL
TAG_OWNER_UID = f"{names.GROUP}/owner-uid"
TAG_MANAGED_BY = names.LABEL_MANAGED_BY

# Karpenter's nodepool name is copied into the node label karpenter.sh/nodepool, so it
# must also be a valid label value: 63 characters.
MAX_NAME = 63
# EC2 placement group names may be 255 characters; keep them readable in the console.
MAX_PLACEMENT_GROUP_NAME = 100
HASH_LEN = 6


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:HASH_LEN]


def _join(readable: str, digest: str, limit: int) -> str:
    keep = limit - len(digest) - 1
    head = readable[:keep].rstrip("-.")
    return f"{head}-{digest}"


def nodepool_name(namespace: str, vc: str, pool: str, half: str = "") -> str:
    """`<vc>-<pool>[-spot|-ondemand]-<hash>`, at most 63 characters."""
    readable = f"{vc}-{pool}" + (f"-{half}" if half else "")
    return _join(readable, _digest(namespace, vc, pool, half), MAX_NAME)


def nodeclass_name(namespace: str, vc: str, pool: str) -> str:
    return _join(f"{vc}-{pool}", _digest(namespace, vc, pool), MAX_NAME)


def placement_group_name(namespace: str, vc: str, pool: str) -> str:
    """`nightshift-<namespace>-<vc>-<pool>-<hash>`: unique per region and account."""
    readable = f"nightshift-{namespace}-{vc}-{pool}"
    return _join(readable, _digest("placement", namespace, vc, pool), MAX_PLACEMENT_GROUP_NAME)
