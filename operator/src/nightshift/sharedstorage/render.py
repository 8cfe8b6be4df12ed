"""Every object a SharedStorage needs that depends on its spec alone. Pure.

Two more depend on what the reconcile observes and have their own functions: the NFS
clients' PersistentVolume needs the server Service's ClusterIP
(nfs.render_nfs_client), and the Gluster volume needs the server pods' addresses
(gluster.volume_commands).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.sharedstorage import cvmfs, gluster, nfs, s3, squid
from nightshift.sharedstorage.objects import Platform, Storage


def render_storage(obj: Mapping[str, Any], *, platform: Platform,
                   squid_cidrs: Sequence[str] = (),
                   karpenter_nodes: bool = False,
                   pool_taints: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                   ) -> list[dict[str, Any]]:
    """The workloads of a valid SharedStorage: [] for s3, which runs none.

    `squid_cidrs` (cvmfs only) is validate.effective_squid_cidrs(...): never empty for
    a storage that passed validation. `karpenter_nodes`: its VirtualCluster's
    status.mode is karpenter (objects.pool_affinity). `pool_taints`: its pools' own
    taints, which its pods tolerate (objects.pool_tolerations).
    """
    return render_workloads(Storage.of(obj, karpenter_nodes=karpenter_nodes,
                                       pool_taints=pool_taints),
                            platform=platform, squid_cidrs=squid_cidrs)


def render_workloads(st: Storage, *, platform: Platform,
                     squid_cidrs: Sequence[str] = ()) -> list[dict[str, Any]]:
    """render_storage for a storage already parsed (its placement facts on `st`)."""
    t = st.spec.type
    if t == "nfs":
        return nfs.render_nfs_server(st)
    if t == "glusterfs":
        return gluster.render_gluster(st)
    if t == "cvmfs":
        if not squid_cidrs:
            raise ValueError("cvmfs needs the squids' client ranges (squid_cidrs)")
        return [*squid.render_squid(st, platform=platform, allowed_cidrs=squid_cidrs),
                *cvmfs.render_cvmfs_client(st)]
    return []


def endpoints(obj: Mapping[str, Any], *, service_ip: str | None = None,
              load_balancer: str | None = None) -> list[dict[str, str]]:
    """Where clients reach the storage, main one first: what status.endpoints shows."""
    st = Storage.of(obj)
    t = st.spec.type
    if t == "nfs":
        return [{"name": "nfs", "url": nfs.endpoint(service_ip)}] if service_ip else []
    if t == "glusterfs":
        return [{"name": "gluster", "url": gluster.endpoint(st)}]
    if t == "s3":
        return [{"name": "s3", "url": s3.endpoint(st)}]
    out = [{"name": "squid", "url": squid.proxy_url(st)}]
    if load_balancer:
        out.append({"name": "squid-lb", "url": f"http://{load_balancer}:{squid.PORT}"})
    return out
