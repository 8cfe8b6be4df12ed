"""reclaimPolicy Delete for data on nodes' disks: servers stopped, one Job per data node
removing the storage's directories, then the usual last step; a failure stops it with
a condition saying how to look and how to give up on the directories."""

from __future__ import annotations

import copy
from typing import Any

from nightshift.api import names
from nightshift.sharedstorage import reclaim
from nightshift.sharedstorage.objects import Storage
from nightshift.sharedstorage.observe import Sources, SquidSampler, observe
from nightshift.sharedstorage.plan import DELETING, plan
from nightshift.sharedstorage.spec import SharedStorageSpec
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_refusals import NOW
from tests.unit.test_sharedstorage_plan import cond, converge, keys, observed, refs, storage

Obj = dict[str, Any]
GONE_AT = "2026-11-23T11:59:00Z"


def deleting(case: str, data_nodes: list[str], **annotations: str) -> Obj:
    obj = storage(case, deletionTimestamp=GONE_AT)
    obj["spec"]["reclaimPolicy"] = "Delete"
    obj["status"] = {"dataNodes": data_nodes}
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


def finished(job: Obj, how: str) -> Obj:
    job = copy.deepcopy(job)
    job["status"] = {"conditions": [{"type": how, "status": "True"}]}
    return job


def test_the_data_nodes_are_recorded_while_it_runs() -> None:
    obj = storage("nfs-colocated-localdisk")
    obj["status"] = {"dataNodes": ["node-a"]}
    p = plan(observed(obj, server_nodes=["node-b"]))
    assert (p.status or {})["dataNodes"] == ["node-a", "node-b"]
    # Nothing of an NFS export on a claim lives on a node's disk.
    assert "dataNodes" not in (plan(observed(storage("nfs-dedicated"))).status or {})


def test_a_server_that_moved_off_its_data_makes_the_storage_not_ready() -> None:
    """Node-local data (an NFS localDisk export, Gluster bricks) stays on the node: a
    server pod made again elsewhere serves an empty directory."""
    obj = storage("nfs-colocated-localdisk")
    held, _ = converge(obj)
    obj["status"] = {"dataNodes": ["node-a"]}
    ready = cond(plan(observed(obj, held, server_nodes=["node-a"])).status or {}, "Ready")
    assert "moved" not in ready["message"]
    p = plan(observed(obj, held, server_nodes=["node-b"]))
    assert (p.status or {})["phase"] == "Pending"
    assert ("its data was written on 2 nodes but it has 1 server: a server pod moved (a spot "
            "interruption, an eviction, an upgrade) and serves an empty directory, leaving "
            "its data on node-a (status.dataNodes); those files are no longer served: "
            "recreate the storage, and put spec.nfs.pool on on-demand nodes"
            ) in cond(p.status or {}, "Ready")["message"]
    # Gluster: four nodes for three servers.
    st = storage("gluster-nufa")
    spec = SharedStorageSpec.model_validate(st["spec"])
    servers = spec.glusterfs.servers if spec.glusterfs else 0
    nodes = [f"n{i}" for i in range(servers)]
    assert reclaim.moved(Storage.of(st), spec, nodes, nodes) is None
    said = reclaim.moved(Storage.of(st), spec, nodes, ["spare", *nodes[1:]])
    assert said is not None and "leaving its data on n0" in said, said
    assert "spec.glusterfs.pool" in said
    # Nothing of an NFS export on a claim lives on a node.
    claim = storage("nfs-dedicated")
    assert reclaim.moved(Storage.of(claim), SharedStorageSpec.model_validate(claim["spec"]),
                         ["a"], ["b"]) is None


def test_gluster_under_delete_stops_servers_then_cleans_each_node_then_finishes() -> None:
    held, _ = converge(storage("gluster-nufa"))
    obj = deleting("gluster-nufa", ["n1", "n2"])
    # 1: the servers and clients go first.
    p = plan(observed(obj, held, server_pods_left=2, existing_nodes=frozenset({"n1", "n2"})))
    assert sorted(refs(p.prune)) == ["DaemonSet/montage-gluster-client",
                                     "StatefulSet/montage-gluster"]
    assert not p.remove_finalizer and cond(p.status or {}, DELETING)["reason"] == "Reclaiming"
    # 2: server pods still terminating: wait.
    rest = [o for o in held if o["kind"] not in ("StatefulSet", "DaemonSet")]
    p = plan(observed(obj, rest, server_pods_left=1, existing_nodes=frozenset({"n1", "n2"})))
    assert p.apply == [] and p.prune == [] and p.requeue_after
    # 3: one Job per node that still exists (n2 was removed with its disk).
    p = plan(observed(obj, rest, existing_nodes=frozenset({"n1"})))
    assert keys(p.apply) == ["Job/montage-reclaim-0"]
    job = p.apply[0]
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "n1"
    assert [v["hostPath"]["path"] for v in pod["volumes"]] == [
        "/mnt/k8s-disks/0/nightshift/gluster", "/var/lib/nightshift/glusterd/physics",
        "/var/lib/nightshift/glusterd-run/physics"]
    assert pod["containers"][0]["command"][-3:] == [
        "/reclaim/d0/physics-montage", "/reclaim/d1/montage", "/reclaim/d2/montage"]
    assert job["metadata"]["ownerReferences"][0]["kind"] == "SharedStorage"
    assert "n1" in cond(p.status or {}, DELETING)["message"]
    # 4: running, then complete: the last step.
    p = plan(observed(obj, [*rest, job], existing_nodes=frozenset({"n1"})))
    assert p.apply == [] and not p.remove_finalizer
    p = plan(observed(obj, [*rest, finished(job, "Complete")],
                      existing_nodes=frozenset({"n1"})))
    assert p.remove_finalizer and p.gone


def test_a_failed_cleanup_stops_the_deletion_and_says_how_to_go_on() -> None:
    obj = deleting("nfs-colocated-localdisk", ["n1"])
    job = reclaim.reclaim_job(Storage.of(obj), SharedStorageSpec.model_validate(obj["spec"]),
                              "n1", 0, "img")
    p = plan(observed(obj, [finished(job, "Failed")], existing_nodes=frozenset({"n1"})))
    c = cond(p.status or {}, DELETING)
    assert not p.remove_finalizer and c["reason"] == "ReclaimFailed"
    assert "job/scratch-reclaim-0" in c["message"]
    assert "nightshift.io/skip-reclaim=true" in c["message"]
    skipped = deleting("nfs-colocated-localdisk", ["n1"],
                       **{reclaim.ANNOTATION_SKIP_RECLAIM: "true"})
    assert plan(observed(skipped, [finished(job, "Failed")])).remove_finalizer


def test_a_reclaim_job_whose_pod_is_refused_says_so_while_reclaiming() -> None:
    obj = deleting("nfs-colocated-localdisk", ["n1"])
    job = reclaim.reclaim_job(Storage.of(obj), SharedStorageSpec.model_validate(obj["spec"]),
                              "n1", 0, "img")
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    said = "exceeded quota: physics, requested: pods=1, limited: pods=0"
    p = plan(observed(obj, [job], existing_nodes=frozenset({"n1"}),
                      pods_refused=[("Job", "scratch-reclaim-0", said)]))
    c = cond(p.status or {}, DELETING)
    assert c["reason"] == "Reclaiming" and not p.remove_finalizer
    assert c["message"].endswith(
        "Job scratch-reclaim-0 cannot create its pods: exceeded quota: physics, requested: "
        "pods=1, limited: pods=0; its pods are created as the namespace's ResourceQuota "
        "frees up; else raise it"), c


def test_retain_and_claims_keep_the_old_last_step() -> None:
    obj = deleting("gluster-nufa", ["n1"])
    obj["spec"]["reclaimPolicy"] = "Retain"
    assert plan(observed(obj, existing_nodes=frozenset({"n1"}))).remove_finalizer
    obj = deleting("nfs-dedicated", ["n1"])
    assert plan(observed(obj, existing_nodes=frozenset({"n1"}))).remove_finalizer


def test_runs_still_using_it_come_first() -> None:
    obj = deleting("gluster-nufa", ["n1"])
    p = plan(observed(obj, running_runs=["nightly"], existing_nodes=frozenset({"n1"})))
    assert cond(p.status or {}, DELETING)["reason"] == "InUse" and p.apply == []
    assert names.ANNOTATION_FORCE_DELETE in cond(p.status or {}, DELETING)["message"]


def test_a_reclaim_pod_that_does_not_start_says_why_while_reclaiming() -> None:
    obj = deleting("nfs-colocated-localdisk", ["n1"])
    obj["metadata"]["finalizers"] = [names.FINALIZER_SHARED_STORAGE]
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    job = reclaim.reclaim_job(Storage.of(obj), SharedStorageSpec.model_validate(obj["spec"]),
                              "n1", 0, "nightshift-nfs-ganesha:dev")
    template = job["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "scratch-reclaim-0-x7k2p", "namespace": ns,
                        "labels": template["metadata"]["labels"]},
           "spec": template["spec"],
           "status": {"phase": "Pending", "containerStatuses": [{
               "name": "reclaim", "ready": False, "state": {"waiting": {
                   "reason": "ImagePullBackOff",
                   "message": 'Back-off pulling image "nightshift-nfs-ganesha:dev"'}}}]}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    kube = RecordingKube([obj, job, pod, node])
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), ns, name, NOW)
    assert got is not None and [p.pod for p in got.pods_not_starting] == [
        "scratch-reclaim-0-x7k2p"]
    c = cond(plan(got).status or {}, DELETING)
    assert c["reason"] == "Reclaiming"
    assert c["message"].startswith("removing the data directories on node(s) n1")
    assert ("pod scratch-reclaim-0-x7k2p container reclaim: ImagePullBackOff: Back-off "
            'pulling image "nightshift-nfs-ganesha:dev"; check the operator\'s storage '
            "images") in c["message"], c
    # Finished, its pods are not read again.
    kube.put(finished(job, "Complete"))
    selectors: list[str] = []
    real = kube.list

    def listing(api_version: str, kind: str, *args: Any, **kw: Any) -> list[Obj]:
        if kind == "Pod":
            selectors.append(str(kw.get("label_selector")))
        return real(api_version, kind, *args, **kw)

    kube.list = listing  # type: ignore[method-assign]
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), ns, name, NOW)
    assert got is not None and got.pods_not_starting == []
    assert not [s for s in selectors if reclaim.COMPONENT_RECLAIM in s], selectors


def test_a_reclaim_waiting_on_a_node_that_is_not_ready_names_the_node_and_the_way_out() -> None:
    # Its pod, pinned by nodeName, stays Pending with no container status: only the
    # node says why.
    obj = deleting("nfs-colocated-localdisk", ["n1", "n2"])
    obj["metadata"]["finalizers"] = [names.FINALIZER_SHARED_STORAGE]
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    spec = SharedStorageSpec.model_validate(obj["spec"])
    jobs = [reclaim.reclaim_job(Storage.of(obj), spec, n, i, "img")
            for i, n in enumerate(["n1", "n2"])]
    lost = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "status": {"conditions": [{
                "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": "2026-11-23T11:50:00Z"}]}}
    fine = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    kube = RecordingKube([obj, *jobs, lost, fine])
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), ns, name, NOW)
    assert got is not None and dict(got.unready_nodes) == {
        "n1": "NodeStatusUnknown: Kubelet stopped posting node status. since "
              "2026-11-23T11:50:00Z"}
    c = cond(plan(got).status or {}, DELETING)
    assert c["reason"] == "Reclaiming"
    assert c["message"] == (
        "removing the data directories on node(s) n1, n2 (reclaimPolicy Delete); node n1 "
        "is not Ready (NodeStatusUnknown: Kubelet stopped posting node status. since "
        "2026-11-23T11:50:00Z): its reclaim pod starts when the node's kubelet is back; "
        "if the node is gone for good, delete it (kubectl delete node n1) and its data "
        "goes with its disk"), c
    # A Node no kubelet ever reported for says so; a deleted one ends that node's part.
    assert reclaim.not_ready({"metadata": {"name": "n3"}}) == (
        "it has no Ready condition: no kubelet has reported for it")
    kube.delete("v1", "Node", "n1")
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), ns, name, NOW)
    assert got is not None and not got.unready_nodes
    c = cond(plan(got).status or {}, DELETING)
    assert c["message"] == ("removing the data directories on node(s) n2 (reclaimPolicy "
                            "Delete)"), c


def test_servers_left_on_a_node_that_is_not_ready_name_it() -> None:
    # A server pod on a lost node stays Terminating until the node is back or deleted.
    obj = deleting("nfs-colocated-localdisk", ["n1"])
    p = plan(observed(obj, server_pods_left=1, server_nodes=["n1"],
                      existing_nodes=frozenset({"n1"}),
                      unready_nodes={"n1": "NodeStatusUnknown"}))
    c = cond(p.status or {}, DELETING)
    assert c["reason"] == "Reclaiming" and p.apply == [], c
    assert c["message"] == (
        "stopping the servers (1 pods left) before removing their data on the nodes "
        "(reclaimPolicy Delete); node n1 is not Ready (NodeStatusUnknown): its server pod "
        "ends when the node's kubelet is back; if the node is gone for good, delete it "
        "(kubectl delete node n1) and its data goes with its disk"), c


def test_a_reclaim_policy_change_reaches_the_data_claims_owner() -> None:
    """Delete -> Retain takes the storage's owner off the nfs data claim (the garbage
    collector would otherwise still delete it, and its volume, with the storage);
    Retain -> Delete puts it back."""
    def claim(objs: list[Obj]) -> Obj:
        return next(o for o in objs if o["kind"] == "PersistentVolumeClaim"
                    and o["metadata"]["name"].endswith("-nfs-data"))

    deleting_kind = storage("nfs-dedicated")
    deleting_kind["spec"]["reclaimPolicy"] = "Delete"
    held, _ = converge(deleting_kind)
    assert [r["kind"] for r in claim(held)["metadata"]["ownerReferences"]] == ["SharedStorage"]
    retained = storage("nfs-dedicated")
    retained["spec"]["reclaimPolicy"] = "Retain"
    p = plan(observed(retained, held))
    assert "ownerReferences" not in claim(p.apply)["metadata"], keys(p.apply)
    held, _ = converge(retained)
    p = plan(observed(deleting_kind, held))
    assert claim(p.apply)["metadata"]["ownerReferences"], keys(p.apply)
