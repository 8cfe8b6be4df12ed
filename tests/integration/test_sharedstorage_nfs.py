"""NFS SharedStorages on the local cluster: the clients' PersistentVolume of the
export's ClusterIP, bound claims and deletion; a localDisk export whose server moves to
another node is not Ready; reclaimPolicy Delete removes the data on its node, and names
a data node that is not Ready while its reclaim waits there. (Split
from test_sharedstorage.py, whose fixtures these share.)"""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import kwok_node_pool
from tests.integration.test_sharedstorage import (
    condition,
    get,
    gone,
    kwok_pool,
    ns,
    storage,
    storage_operator,
    wait_ready,
)

__all__ = ["kwok_pool", "ns", "storage_operator"]  # fixtures, used by name


def _a_server_moved_off_its_disk_is_not_ready(kube: Kube, kubectl: Kubectl, ns: str,
                                              pool: str) -> None:
    """The localDisk export's node is cordoned and its server pod deleted (as a spot
    interruption would): the real scheduler puts the new one on the pool's other node,
    which has none of the data, and the storage says so instead of staying Ready."""
    spare = kwok_node_pool(pool)
    spare["metadata"]["name"] = f"kwok-{pool}-spare"
    spare["metadata"]["labels"]["kubernetes.io/hostname"] = spare["metadata"]["name"]
    kubectl.apply(spare)
    try:
        kubectl("cordon", f"kwok-{pool}")
        kubectl("-n", ns, "delete", "pod", "-l", f"{names.LABEL_STORAGE}=scratch,"
                "app.kubernetes.io/component=nfs-server", "--grace-period=0", "--force")

        def said() -> str | None:
            ready: dict[str, Any] = next((c for c in (get(kube, ns, "scratch").get(
                "status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})
            return str(ready.get("message")) if "a server pod moved" in str(
                ready.get("message")) else None

        text = wait_for("the move named", said, 60)
        assert f"leaving its data on kwok-{pool} (status.dataNodes)" in text, text
    finally:
        kubectl("uncordon", f"kwok-{pool}", check=False)
        kubectl("delete", "node", spare["metadata"]["name"], "--wait=false", check=False)


def test_nfs_client_volume_then_deletion(kube: Kube, kubectl: Kubectl,
                                         storage_operator: OperatorProcess, ns: str,
                                         kwok_pool: str) -> None:
    kubectl.apply(storage(ns, "scratch", {
        "type": "nfs", "reclaimPolicy": "Retain",
        "nfs": {"server": "colocated", "pool": kwok_pool, "backing": {"localDisk": True},
                "clients": {"pools": [kwok_pool]}}}))
    obj = wait_ready(kube, storage_operator, ns, "scratch")
    svc = kube.get("v1", "Service", "scratch-nfs", ns)
    assert svc is not None
    ip = svc["spec"]["clusterIP"]
    assert obj["status"]["endpoint"] == f"nfs://{ip}:/data"
    sel = f"{names.LABEL_STORAGE}=scratch,{names.LABEL_STORAGE_NAMESPACE}={ns}"
    (pv,) = kube.list("v1", "PersistentVolume", label_selector=sel)
    assert pv["spec"]["nfs"] == {"server": ip, "path": "/data"}
    assert pv["status"]["phase"] == "Bound"
    claim = kube.get("v1", "PersistentVolumeClaim", "scratch-nfs-client", ns)
    assert claim is not None and claim["status"]["phase"] == "Bound"
    _a_server_moved_off_its_disk_is_not_ready(kube, kubectl, ns, kwok_pool)
    kubectl("-n", ns, "delete", "sharedstorage", "scratch", "--wait=false")
    wait_for("the storage deleted", lambda: gone(kube, ns, "scratch"), 30)
    wait_for("its PersistentVolume deleted", lambda: not kube.list(
        "v1", "PersistentVolume", label_selector=sel), 60)


def test_reclaim_delete_removes_the_data_on_its_node_then_goes(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str) -> None:
    """reclaimPolicy Delete with the export on the node's disk: the server stops, a Job
    on the node that held the data removes it (KWOK completes it here; the directories
    themselves: tests/unit/test_sharedstorage_reclaim.py), then the storage goes."""
    kubectl.apply(storage(ns, "tmp", {
        "type": "nfs", "reclaimPolicy": "Delete",
        "nfs": {"server": "colocated", "pool": kwok_pool, "backing": {"localDisk": True},
                "clients": {"pools": [kwok_pool]}}}))
    obj = wait_ready(kube, storage_operator, ns, "tmp")
    (node,) = obj["status"]["dataNodes"]
    assert node.startswith("kwok-")
    kubectl("-n", ns, "delete", "sharedstorage", "tmp", "--wait=false")
    job = wait_for("the reclaim Job", lambda: kube.get("batch/v1", "Job", "tmp-reclaim-0", ns),
                   60)
    assert job["spec"]["template"]["spec"]["nodeName"] == node
    assert kube.get("apps/v1", "Deployment", "tmp-nfs", ns) is None
    wait_for("the storage deleted", lambda: gone(kube, ns, "tmp"), 90)



def test_a_reclaim_waiting_on_a_lost_node_names_it_and_ends_when_it_is_deleted(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str) -> None:
    """Data left on a node that stopped reporting (its Ready Unknown, as the node
    lifecycle controller sets it; no KWOK or kubelet runs its pods): the reclaim pod
    pinned there cannot start, and Deleting names the node and the way out; deleting the
    Node ends the deletion. (A server pod that moved left the data there: its record in
    status.dataNodes is written by hand, as KWOK never lets go of a node it managed.)"""
    lost = f"kwok-{kwok_pool}-lost"
    node = kwok_node_pool(kwok_pool)
    node["metadata"] = {"name": lost, "labels": {"kubernetes.io/hostname": lost}}
    node["status"]["conditions"] = [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastTransitionTime": "2026-11-30T00:00:00Z",
        "lastHeartbeatTime": "2026-11-30T00:00:00Z"}]
    kubectl.apply(node)
    try:
        kubectl.apply(storage(ns, "lost", {
            "type": "nfs", "reclaimPolicy": "Delete",
            "nfs": {"server": "colocated", "pool": kwok_pool, "backing": {"localDisk": True},
                    "clients": {"pools": [kwok_pool]}}}))
        (served,) = wait_ready(kube, storage_operator, ns, "lost")["status"]["dataNodes"]

        def recorded() -> bool:
            got = get(kube, ns, "lost")["status"]
            if lost not in got["dataNodes"]:
                kube.patch_status(names.API_VERSION, names.SHAREDSTORAGE, "lost", ns,
                                  {"dataNodes": sorted([served, lost])})
                return False
            return True

        wait_for("the lost node in status.dataNodes", recorded, 30)
        kubectl("-n", ns, "delete", "sharedstorage", "lost", "--wait=false")

        def deleting_says() -> str | None:
            msg = str(condition(get(kube, ns, "lost"), "Deleting").get("message"))
            # Once the served node's reclaim is done (KWOK completes it), only the lost
            # node's is left.
            return msg if msg.startswith(f"removing the data directories on node(s) {lost} "
                                         ) else None

        text = wait_for("the reclaim's wait named", deleting_says, 90)
        assert text == (
            f"removing the data directories on node(s) {lost} (reclaimPolicy Delete); "
            f"node {lost} is not Ready (NodeStatusUnknown: Kubelet stopped posting node "
            "status. since 2026-11-30T00:00:00Z): its reclaim pod starts when the node's "
            f"kubelet is back; if the node is gone for good, delete it (kubectl delete "
            f"node {lost}) and its data goes with its disk"), text
        assert kube.get("batch/v1", "Job", "lost-reclaim-1", ns) is not None
        kubectl("delete", "node", lost, "--wait=false")
        wait_for("the storage deleted", lambda: gone(kube, ns, "lost"), 90)
    finally:
        kubectl("delete", "node", lost, "--ignore-not-found", "--wait=false", check=False)
