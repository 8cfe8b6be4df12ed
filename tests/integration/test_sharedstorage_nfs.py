"""NFS SharedStorages on the local cluster: the clients' PersistentVolume of the
export's ClusterIP, bound claims and deletion; a localDisk export whose server moves to
another node is not Ready; reclaimPolicy Delete removes the data on its node. (Split
from test_sharedstorage.py, whose fixtures these share.)"""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import kwok_node_pool
from tests.integration.test_sharedstorage import (
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
