"""VirtualCluster -> Karpenter NodePools and node classes. Pure: no I/O, no clock.

One NodePool per pool (two for spot-then-on-demand), each with its own node class
(placement groups and instance-store policy differ per pool).

NodePools and node classes are cluster-scoped, so they cannot carry an ownerReference
to a namespaced VirtualCluster (the garbage collector would delete them at once). They
carry the VirtualCluster's namespace and name as labels instead, and the reconciler
deletes them from the VirtualCluster's finalizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nightshift.api import names
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.catalog import (
    CLASS_CATEGORIES,
    CLASS_MIN_GENERATION,
    KWOK_ARCH,
    InstanceCatalog,
    kwok_families_for,
    kwok_family,
    parse_quantity,
)
from nightshift.virtualcluster.legacy import LEGACY
from nightshift.virtualcluster.nodeclasses import ec2_nodeclass, kwok_nodeclass, metadata
from nightshift.virtualcluster.spec import Pool, VirtualClusterSpec

Provider = Literal["aws", "kwok", "static"]

KARPENTER_API = "karpenter.sh/v1"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
AWS_CATEGORY = "karpenter.k8s.aws/instance-category"
AWS_FAMILY = "karpenter.k8s.aws/instance-family"
AWS_GENERATION = "karpenter.k8s.aws/instance-generation"
AWS_LOCAL_NVME = "karpenter.k8s.aws/instance-local-nvme"
KWOK_FAMILY = "karpenter.kwok.sh/instance-family"
KWOK_CPU = "karpenter.kwok.sh/instance-cpu"
AWS_CPU = "karpenter.k8s.aws/instance-cpu"
AWS_MEMORY = "karpenter.k8s.aws/instance-memory"

# Karpenter tries NodePools by descending weight and moves to a lighter one only when
# the heavier cannot launch (limit reached, or no offering: spot capacity errors mark
# the spot offerings unavailable for a few minutes). Spot must be the heavier.
WEIGHT_SPOT = 20
WEIGHT_ON_DEMAND = 10

HALF_SPOT = "spot"
HALF_ON_DEMAND = "ondemand"


@dataclass(frozen=True)
class Usage:
    """What one NodePool's NodeClaims hold, as Karpenter counts it against limits."""

    cpu: float = 0.0
    memory_bytes: float = 0.0
    nodes: int = 0


def vc_identity(vc: Mapping[str, Any]) -> tuple[str, str, VirtualClusterSpec]:
    meta = vc.get("metadata", {})
    spec = VirtualClusterSpec.model_validate(vc.get("spec", {}))
    return str(meta.get("namespace", "default")), str(meta["name"]), spec


def halves(pool: Pool) -> list[tuple[str, list[str], int | None]]:
    """(name suffix, capacity types, weight) of each NodePool a pool becomes."""
    if pool.capacity == "spot-then-on-demand":
        return [
            (HALF_SPOT, ["spot"], WEIGHT_SPOT),
            (HALF_ON_DEMAND, ["on-demand"], WEIGHT_ON_DEMAND),
        ]
    return [("", [pool.capacity], None)]


def nodepool_names(namespace: str, vc: str, pool: Pool) -> list[str]:
    return [vcnames.nodepool_name(namespace, vc, pool.name, h) for h, _, _ in halves(pool)]


def render_virtualcluster(
    vc: Mapping[str, Any],
    provider: Provider,
    *,
    catalog: InstanceCatalog | None = None,
    usage: Mapping[str, Usage] | None = None,
) -> list[dict[str, Any]]:
    """Every NodePool and node class of a VirtualCluster; [] in static mode.

    `catalog` turns a class into KWOK families (a built-in table when None). `usage`,
    per NodePool name, lets the two halves of a spot-then-on-demand pool share one
    limit: each half may grow only into what the other does not hold.
    """
    if provider == "static":
        return []
    namespace, name, spec = vc_identity(vc)
    out: list[dict[str, Any]] = []
    for pool in spec.pools:
        nodeclass = vcnames.nodeclass_name(namespace, name, pool.name)
        if provider == "aws":
            out.append(ec2_nodeclass(namespace, name, nodeclass, pool, spec.node_class))
        else:
            out.append(kwok_nodeclass(namespace, name, nodeclass, pool, spec.node_class))
        out.extend(_nodepools(namespace, name, pool, nodeclass, provider, catalog, usage or {}))
    return out


def _nodepools(
    namespace: str,
    vc: str,
    pool: Pool,
    nodeclass: str,
    provider: Provider,
    catalog: InstanceCatalog | None,
    usage: Mapping[str, Usage],
) -> list[dict[str, Any]]:
    parts = halves(pool)
    np_names = [vcnames.nodepool_name(namespace, vc, pool.name, h) for h, _, _ in parts]
    out = []
    for (half, capacity_types, weight), np_name in zip(parts, np_names, strict=True):
        others = [usage.get(n, Usage()) for n in np_names if n != np_name]
        template_labels = {
            **pool.labels,
            names.LABEL_VIRTUAL_CLUSTER: vc,
            vcnames.LABEL_VC_NAMESPACE: namespace,
            names.LABEL_POOL: pool.name,
        }
        taints: list[dict[str, Any]] = [
            {"key": names.TAINT_POOL, "value": pool.name, "effect": "NoSchedule"}
        ]
        taints += [t.model_dump(exclude_none=True) for t in pool.taints]
        node_spec: dict[str, Any] = {
            "nodeClassRef": _nodeclass_ref(provider, nodeclass),
            "requirements": _requirements(pool, capacity_types, provider, catalog),
            "taints": taints,
        }
        if pool.expire_after:
            node_spec["expireAfter"] = pool.expire_after
        labels = metadata(namespace, vc, pool.name, "nodepool")
        if half:
            labels[vcnames.LABEL_CAPACITY_HALF] = half
        spec: dict[str, Any] = {
            "template": {"metadata": {"labels": template_labels}, "spec": node_spec},
            # WhenEmpty: a node is only ever removed once no task runs on it; tasks
            # also carry karpenter.sh/do-not-disrupt against drift and expiry.
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": pool.consolidate_after,
            },
        }
        limits = _limits(pool, others)
        if limits:
            spec["limits"] = limits
        if weight is not None:
            spec["weight"] = weight
        out.append(
            {
                "apiVersion": KARPENTER_API,
                "kind": "NodePool",
                "metadata": {"name": np_name, "labels": labels},
                "spec": spec,
            }
        )
    return out


def _nodeclass_ref(provider: Provider, name: str) -> dict[str, str]:
    if provider == "aws":
        return {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": name}
    return {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": name}


def _req(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"key": key, "operator": op}
    if values is not None:
        r["values"] = values
    return r


def _requirements(
    pool: Pool, capacity_types: list[str], provider: Provider, catalog: InstanceCatalog | None
) -> list[dict[str, Any]]:
    arch: list[str] = sorted(set(pool.arch))
    if provider == "kwok":
        arch = sorted({KWOK_ARCH[a] for a in arch})
    reqs = [
        _req(LABEL_OS, "In", ["linux"]),
        _req(LABEL_ARCH, "In", arch),
        _req(LABEL_CAPACITY_TYPE, "In", capacity_types),
    ]
    if pool.instance_types:
        reqs.append(_req(LABEL_INSTANCE_TYPE, "In", sorted(pool.instance_types)))
    raid0 = pool.local_disk == "raid0"
    if provider == "aws":
        if pool.families:
            reqs.append(_req(AWS_FAMILY, "In", sorted(pool.families)))
        elif not pool.instance_types:
            reqs.append(_req(AWS_CATEGORY, "In", list(CLASS_CATEGORIES[pool.class_])))
            gen = CLASS_MIN_GENERATION[pool.class_] - 1
            reqs.append(_req(AWS_GENERATION, "Gt", [str(gen)]))
        if raid0:
            # Only types with instance-store NVMe: RAID0 of nothing is the root volume.
            reqs.append(_req(AWS_LOCAL_NVME, "Gt", ["0"]))
    elif pool.families:
        reqs.append(_req(KWOK_FAMILY, "In", sorted({kwok_family(f) for f in pool.families})))
    elif not pool.instance_types:
        fams = kwok_families_for(pool.class_, catalog, local_nvme=raid0)
        reqs.append(_req(KWOK_FAMILY, "In", fams))
    old = LEGACY.get(pool.like or "")
    if old is not None:
        # At least the seed type's vCPUs and memory (Karpenter's Gt is strict).
        if provider == "aws":
            reqs.append(_req(AWS_CPU, "Gt", [str(old.vcpu - 1)]))
            reqs.append(_req(AWS_MEMORY, "Gt", [str(old.memory_mib - 1)]))
        else:
            # KWOK labels memory as a quantity ("64Gi"), which Gt cannot compare.
            reqs.append(_req(KWOK_CPU, "Gt", [str(old.vcpu - 1)]))
            if catalog is not None:
                allowed = set(pool.families or catalog.families_for_class(
                    pool.class_, local_nvme=raid0))
                reqs.append(_req(LABEL_INSTANCE_TYPE, "In", sorted(
                    t.name for t in catalog.types.values() if t.family in allowed
                    and t.cpu >= old.vcpu and t.memory_bytes >= old.memory_mib * 2**20)))
    return reqs


def _limits(pool: Pool, others: list[Usage]) -> dict[str, str]:
    limits: dict[str, str] = {}
    taken_cpu = sum(u.cpu for u in others)
    taken_mem = sum(u.memory_bytes for u in others)
    taken_nodes = sum(u.nodes for u in others)
    if pool.max_cpu is not None:
        limits["cpu"] = _cores(max(0.0, pool.max_cpu - taken_cpu))
    if pool.max_memory is not None:
        if taken_mem:
            left = max(0.0, parse_quantity(pool.max_memory) - taken_mem)
            limits["memory"] = f"{int(left // 2**20)}Mi"
        else:
            limits["memory"] = pool.max_memory
    if pool.max_nodes is not None:
        limits["nodes"] = str(max(0, pool.max_nodes - taken_nodes))
    return limits


def _cores(cpu: float) -> str:
    return str(int(cpu)) if cpu == int(cpu) else f"{int(cpu * 1000)}m"
