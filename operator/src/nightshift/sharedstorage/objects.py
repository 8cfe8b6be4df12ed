"""What every rendered object of a SharedStorage shares: names, labels, owner, placement.

Namespaced objects are `<storage>-<role>`: the storage name is at most 40 characters
(CEL) and roles at most 22, so names stay DNS labels without a hash. The one
cluster-scoped object (the NFS clients' PersistentVolume) cannot have an ownerReference
to a namespaced owner; its name carries a hash of namespace/name and its labels say
whose it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nightshift.api import names, nodeaffinity
from nightshift.sharedstorage.spec import SharedStorageSpec

# Where the rendered objects run: "aws" adds the AWS Load Balancer Controller's
# annotations to a LoadBalancer Service; "local" (KWOK, static, the local cluster) not.
Platform = Literal["aws", "local"]

MAX_NAME = 63
HASH_LEN = 6
PART_OF = "nightshift"
# Host directories of node-level mounts and state, one subdirectory per storage.
HOST_ROOT = "/var/lib/nightshift"

COMPONENT_NFS_SERVER = "nfs-server"
COMPONENT_GLUSTER_SERVER = "gluster-server"
COMPONENT_GLUSTER_CLIENT = "gluster-client"
COMPONENT_GLUSTER_VOLUME = "gluster-volume"
COMPONENT_CVMFS_CLIENT = "cvmfs-client"
COMPONENT_SQUID = "squid"
COMPONENT_NFS_CLIENT = "nfs-client"


@dataclass(frozen=True)
class Storage:
    """A SharedStorage object: identity plus its parsed spec."""

    name: str
    namespace: str
    uid: str
    spec: SharedStorageSpec
    # Karpenter makes spec.virtualCluster's nodes (its status.mode): pool_affinity leaves
    # out the term for hand-labeled nodes.
    karpenter_nodes: bool = False
    # spec.virtualCluster's pools -> the taints each adds to its nodes besides the pool
    # taint (its spec.pools[].taints): the storage's pods there tolerate them.
    pool_taints: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)

    @classmethod
    def of(cls, obj: Mapping[str, Any], *, karpenter_nodes: bool = False,
           pool_taints: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> Storage:
        meta = obj.get("metadata", {})
        return cls(
            name=str(meta["name"]),
            namespace=str(meta.get("namespace", "default")),
            uid=str(meta.get("uid", "")),
            spec=SharedStorageSpec.model_validate(obj.get("spec", {})),
            karpenter_nodes=karpenter_nodes,
            pool_taints=dict(pool_taints or {}),
        )

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.SHAREDSTORAGE,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def object_name(self, role: str) -> str:
        return f"{self.name}-{role}"

    def selector(self, component: str) -> dict[str, str]:
        """The labels a workload's selector matches: stable for the object's life."""
        return {names.LABEL_STORAGE: self.name, names.LABEL_COMPONENT: component}

    def labels(self, component: str, app: str) -> dict[str, str]:
        return {
            **self.selector(component),
            names.LABEL_NAME: app,
            names.LABEL_INSTANCE: self.name,
            names.LABEL_PART_OF: PART_OF,
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
        }

    def metadata(self, role: str, component: str, app: str, *,
                 owned: bool = True) -> dict[str, Any]:
        """Namespaced metadata. owned=False leaves the object to outlive the storage
        (reclaimPolicy Retain): the garbage collector deletes only what is owned."""
        meta: dict[str, Any] = {
            "name": self.object_name(role),
            "namespace": self.namespace,
            "labels": self.labels(component, app),
        }
        if owned:
            meta["ownerReferences"] = [self.owner_reference()]
        return meta

    def cluster_name(self, role: str) -> str:
        """`<namespace>-<name>-<role>-<hash>` for cluster-scoped objects."""
        digest = hashlib.sha256(f"{self.namespace}/{self.name}/{role}".encode()).hexdigest()
        head = f"{self.namespace}-{self.name}-{role}"[: MAX_NAME - HASH_LEN - 1].rstrip("-.")
        return f"{head}-{digest[:HASH_LEN]}"

    def host_dir(self, kind: str) -> str:
        """A node directory of this storage's own, e.g. /var/lib/nightshift/cvmfs/ns/name."""
        return f"{HOST_ROOT}/{kind}/{self.namespace}/{self.name}"


def pool_affinity(pools: Iterable[str], st: Storage) -> dict[str, Any]:
    """Nodes of `pools`: of the storage's VirtualCluster, or hand-labeled static ones.

    Pool names are per namespace but nodes are cluster-scoped, so without the
    VirtualCluster terms a `workers` client could land on another collaboration's
    `workers` nodes: the rule stage pods follow too (api/nodeaffinity), with the
    term for hand-labeled static nodes left out where Karpenter makes the
    VirtualCluster's nodes.
    """
    pool = {"key": names.LABEL_POOL, "operator": "In", "values": sorted(set(pools))}
    if st.spec.virtual_cluster is None:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [pool]}]}}}
    return nodeaffinity.virtual_cluster_affinity(
        st.spec.virtual_cluster, st.namespace, hand_labeled=not st.karpenter_nodes,
        also=[pool])


def pool_tolerations(st: Storage, pools: Iterable[str]) -> list[dict[str, Any]]:
    """Tolerate exactly the pools' taints: nightshift.io/pool=<pool>:NoSchedule, and
    those the VirtualCluster's pools add (spec.pools[].taints), as stage pods do
    (pipelinerun/jobs.placement). Without them a client DaemonSet leaves out the
    pool's nodes and still counts itself complete."""
    named = sorted(set(pools))
    out = [{"key": names.TAINT_POOL, "operator": "Equal", "value": p, "effect": "NoSchedule"}
           for p in named]
    for p in named:
        for taint in st.pool_taints.get(p, ()):
            tol = nodeaffinity.taint_toleration(taint)
            if tol not in out:
                out.append(tol)
    return out


def config_hash(*texts: str) -> str:
    """A short digest of rendered configuration, put on the pod template as an
    annotation so that a changed ConfigMap rolls the pods (they read it only at start)."""
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]



# A PersistentVolume's capacity where nothing enforces one (a node's mount, NFS).
NOMINAL_CAPACITY = "1Gi"


def node_mount_claim(st: Storage, role: str, component: str, app: str, host_path: str, *,
                     read_only: bool) -> list[dict[str, Any]]:
    """A node-mounted directory (a FUSE mount a client DaemonSet keeps on every client
    node) as a PersistentVolume and the claim `<name>-<role>-client` bound to it.

    Why not a hostPath volume in the pipeline pods: the baseline and restricted Pod
    Security Standards refuse hostPath volumes but admit claims, whatever backs them.
    The PV has no node affinity: the same path on whichever node the pod lands (type
    Directory: a node whose client never ran fails the pod's start). A client that ran
    but did not mount leaves the directory there, empty: pods wait for a FUSE mount at
    each such path they use before using it (run.sh for the steps' mounts,
    pipelinerun/fusewait.py; the runner for inputs and outputs, runner/mounts.py).
    Cluster-scoped, so no owner: the labels say whose it is and the storage's deletion
    removes it.
    """
    pv_name = st.cluster_name(role)
    claim = st.object_name(f"{role}-client")
    mode = "ReadOnlyMany" if read_only else "ReadWriteMany"
    labels = {**st.labels(component, app), names.LABEL_STORAGE_NAMESPACE: st.namespace}
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": labels},
        "spec": {
            "capacity": {"storage": NOMINAL_CAPACITY},
            "accessModes": [mode],
            # Deleting the PV never touches the mounted data; it is only a pointer.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": host_path, "type": "Directory"},
            "claimRef": {"namespace": st.namespace, "name": claim},
        },
    }
    pvc = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": st.metadata(f"{role}-client", component, app),
        "spec": {"accessModes": [mode], "storageClassName": "", "volumeName": pv_name,
                 "resources": {"requests": {"storage": NOMINAL_CAPACITY}}},
    }
    return [pv, pvc]


# The renderers name their images bare (images/<name> builds nightshift-<name>).
IMAGE_PREFIX = "nightshift-"
# A daemon that exits on a bad setting (a mount that fails, a config squid refuses)
# leaves its last log lines in the pod's status, where a not-Ready storage's reason
# quotes them (status.pods_not_starting): its crash loop is not silent.
TERMINATION_MESSAGE = {"terminationMessagePolicy": "FallbackToLogsOnError"}


def with_images(objs: Iterable[dict[str, Any]], registry: str, tag: str) -> list[dict[str, Any]]:
    """`objs` with each bare nightshift-* container image as `registry/name:tag` (the
    operator's NIGHTSHIFT_STORAGE_IMAGE_*); unchanged when both are empty."""
    out = []
    for obj in objs:
        pod = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {})
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            image = str(c.get("image", ""))
            if image.startswith(IMAGE_PREFIX) and ":" not in image:
                ref = f"{registry.rstrip('/')}/{image}" if registry else image
                c["image"] = f"{ref}:{tag}" if tag else ref
        out.append(obj)
    return out


def mebibytes(quantity_bytes: float) -> int:
    return int(quantity_bytes // 2**20)
