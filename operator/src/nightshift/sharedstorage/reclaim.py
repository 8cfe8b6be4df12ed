"""`reclaimPolicy: Delete` for data on nodes' disks. Pure.

Gluster bricks (and glusterd's state) and an NFS export on `backing.localDisk` are host
directories: the garbage collector cannot remove them. Before the finalizer goes, a
deleted storage under Delete steps through:

1. its servers (and Gluster's clients, whose FUSE mounts hold the bricks open) deleted;
2. once no server pod is left, one Job per node that held data (`status.dataNodes`,
   recorded while the storage ran), pinned to the node, removing the storage's
   directories there; a node that no longer exists took its disk with it;
3. every such Job complete: the usual last step (plan._finalize).

A Job that fails stops the deletion with a Deleting condition naming the node and how to
look; annotating the storage nightshift.io/skip-reclaim: "true" lets it go and leaves
the directories.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.api import conditions, names
from nightshift.sharedstorage import gluster, nfs
from nightshift.sharedstorage.objects import Storage
from nightshift.sharedstorage.spec import SharedStorageSpec

Obj = Mapping[str, Any]

ANNOTATION_SKIP_RECLAIM = f"{names.GROUP}/skip-reclaim"
COMPONENT_RECLAIM = "reclaim"
# The workloads that must be gone before their directories are removed.
SERVER_KINDS = {"glusterfs": ("StatefulSet", "DaemonSet"), "nfs": ("Deployment",)}


def data_dirs(st: Storage, spec: SharedStorageSpec) -> list[str]:
    """The host directories holding this storage's data on the nodes that ran servers;
    [] when nothing of it lives on a node's disk."""
    if spec.type == "glusterfs":
        return [gluster.brick_host_dir(st), st.host_dir("glusterd"), gluster.run_host_dir(st)]
    if spec.type == "nfs" and spec.nfs is not None and spec.nfs.backing.local_disk:
        return [nfs.local_disk_dir(st)]
    return []


def wanted(st: Storage, spec: SharedStorageSpec, annotations: Mapping[str, str]) -> bool:
    return (spec.reclaim_policy == "Delete" and bool(data_dirs(st, spec))
            and annotations.get(ANNOTATION_SKIP_RECLAIM) != "true")


def data_nodes(previous: Sequence[str], server_nodes: Sequence[str]) -> list[str]:
    """Every node that ever ran a server: a pod that moved leaves its data behind."""
    return sorted({*previous, *(n for n in server_nodes if n)})


def moved(st: Storage, spec: SharedStorageSpec, previous: Sequence[str],
          server_nodes: Sequence[str]) -> str | None:
    """Why the storage's data is no longer all served, when a server holding node-local
    data (Gluster bricks, an NFS localDisk export) has run on more nodes than it has
    servers: a pod moved (a spot interruption, an eviction, an upgrade) and the new one
    serves an empty directory, its data left on the old node. Pure: status.dataNodes
    against the server pods' nodes; the server count is immutable (CEL)."""
    if not data_dirs(st, spec):
        return None
    servers, field = ((spec.glusterfs.servers, "spec.glusterfs.pool") if spec.glusterfs
                      else (1, "spec.nfs.pool"))
    nodes = data_nodes(previous, server_nodes)
    if len(nodes) <= servers:
        return None
    left = [n for n in nodes if n not in server_nodes]
    return (f"its data was written on {len(nodes)} nodes but it has {servers} "
            f"server{'s' if servers > 1 else ''}: a server pod moved (a spot interruption, "
            f"an eviction, an upgrade) and serves an empty directory, leaving its data on "
            f"{', '.join(left)} (status.dataNodes); those files are no longer served: "
            f"recreate the storage, and put {field} on on-demand nodes")


def not_ready(node: Obj) -> str | None:
    """Why a Node is not Ready (its Ready condition's reason and message, and since
    when), or None when it is. A pod pinned to it by nodeName waits there, Pending with
    no container status: nothing else would say why its reclaim does not end."""
    c = conditions.find((node.get("status") or {}).get("conditions"), conditions.READY)
    if c is None:
        return "it has no Ready condition: no kubelet has reported for it"
    if c.get("status") == conditions.TRUE:
        return None
    said = ": ".join(str(c[k]) for k in ("reason", "message") if c.get(k))
    since = f" since {c['lastTransitionTime']}" if c.get("lastTransitionTime") else ""
    return f"{said or 'Ready ' + str(c.get('status'))}{since}"


def job_name(st: Storage, index: int) -> str:
    return st.object_name(f"reclaim-{index}")


def reclaim_job(st: Storage, spec: SharedStorageSpec, node: str, index: int,
                image: str) -> dict[str, Any]:
    """A Job on `node` that removes the storage's directories there."""
    dirs = data_dirs(st, spec)
    volumes, mounts, targets = [], [], []
    for i, d in enumerate(dirs):
        parent, base = posixpath.split(d.rstrip("/"))
        volumes.append({"name": f"d{i}", "hostPath": {"path": parent, "type": "Directory"}})
        mounts.append({"name": f"d{i}", "mountPath": f"/reclaim/d{i}"})
        targets.append(f"/reclaim/d{i}/{base}")
    labels = st.labels(COMPONENT_RECLAIM, "nightshift-reclaim")
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(st, index), "namespace": st.namespace,
                     "labels": labels,
                     "ownerReferences": [st.owner_reference()]},
        "spec": {
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    # Straight to the node: it may be cordoned or tainted, being drained.
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "volumes": volumes,
                    "containers": [{
                        "name": "reclaim", "image": image,
                        "command": ["/bin/sh", "-c", 'set -eu; for d in "$@"; do '
                                    'rm -rf -- "$d"; echo "removed $d"; done', "reclaim",
                                    *targets],
                        "volumeMounts": mounts,
                        # Its own small requests: a namespace's quota on requests
                        # refuses a pod without them where no LimitRange gives defaults.
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        # The servers wrote as root (bricks keep trusted.* xattrs).
                        "securityContext": {"runAsUser": 0, "privileged": True},
                    }],
                },
            },
        },
    }


def step(st: Storage, spec: SharedStorageSpec, *, owned: Sequence[Obj], nodes: Sequence[str],
         existing_nodes: frozenset[str], server_pods_left: int, image: str,
         server_nodes: Sequence[str] = (), unready: Mapping[str, str] | None = None,
         ) -> tuple[list[dict[str, Any]], list[Obj], tuple[str, str] | None]:
    """(to apply, to delete, the Deleting condition's (reason, message)); the condition
    is None when every directory is gone and the deletion may finish. `server_nodes`:
    the nodes of the server pods left; `unready`: why each of those and of `nodes`
    that is not Ready is not (not_ready)."""
    unready = unready or {}
    servers = [o for o in owned if o["kind"] in SERVER_KINDS.get(spec.type, ())
               and not o["metadata"].get("deletionTimestamp")]
    if servers or server_pods_left:
        return [], servers, ("Reclaiming", "; ".join([
            f"stopping the servers ({server_pods_left} pods left) before removing their "
            "data on the nodes (reclaimPolicy Delete)",
            *_waiting_on(sorted(set(server_nodes) - {""}), unready, "its server pod ends")]))
    jobs = {str(o["metadata"]["name"]): o for o in owned if o["kind"] == "Job"}
    apply: list[dict[str, Any]] = []
    running: list[str] = []
    for i, node in enumerate(nodes):
        if node not in existing_nodes:
            continue  # the node and its disk are gone
        job = jobs.get(job_name(st, i))
        if job is None:
            apply.append(reclaim_job(st, spec, node, i, image))
            running.append(node)
            continue
        state = _finished(job)
        if state == "Failed":
            return [], [], ("ReclaimFailed", (
                f"removing the data on node {node} failed: kubectl logs -n {st.namespace} "
                f"job/{job_name(st, i)}. Fix the node and delete that Job to try again, or "
                f"keep the directories: kubectl annotate sharedstorage -n {st.namespace} "
                f"{st.name} {ANNOTATION_SKIP_RECLAIM}=true"))
        if state != "Complete":
            running.append(node)
    if running:
        return apply, [], ("Reclaiming", "; ".join([
            "removing the data directories on node(s) "
            f"{', '.join(running)} (reclaimPolicy Delete)",
            *_waiting_on(running, unready, "its reclaim pod starts")]))
    return [], [], None


def _waiting_on(nodes: Sequence[str], unready: Mapping[str, str], what: str) -> list[str]:
    """A sentence for each of `nodes` that is not Ready: the deletion waits on it."""
    return [f"node {n} is not Ready ({unready[n]}): {what} when the node's kubelet is "
            f"back; if the node is gone for good, delete it (kubectl delete node {n}) and "
            "its data goes with its disk" for n in nodes if n in unready]


def _finished(job: Obj) -> str | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None
