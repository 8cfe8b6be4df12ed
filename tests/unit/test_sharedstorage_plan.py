"""The SharedStorage planner: what each type applies and prunes, pass by pass, drift
re-applied, what is never pruned, validation applying nothing, the gluster volume Job,
the status figures, deletion's steps; time only from Observed.now."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.api import conditions, names, podstate
from nightshift.sharedstorage import gluster
from nightshift.sharedstorage.plan import DELETING, plan
from nightshift.sharedstorage.plantypes import Observed, Plan, server_pod
from nightshift.sharedstorage.status import SquidSample
from tests.bad_sharedstorages import BAD, FACTS, GOOD
from tests.golden_util import check_golden

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
Obj = dict[str, Any]


def storage(case: str, *, finalizer: bool = True, **meta: Any) -> Obj:
    obj = copy.deepcopy(GOOD[case])
    if finalizer:
        obj["metadata"]["finalizers"] = [names.FINALIZER_SHARED_STORAGE]
    obj["metadata"].update(meta)
    return obj


def observed(obj: Obj, owned: list[Obj] | None = None, **kw: Any) -> Observed:
    return Observed(storage=obj, facts=FACTS, platform="aws", owned=owned or [], now=NOW, **kw)


def served(p: Plan) -> list[Obj]:
    """What the API server holds after applying `p` to nothing: the applied objects,
    with the fields the server adds (status, defaults) that are not drift."""
    out = []
    for m in p.apply:
        o = copy.deepcopy(m)
        o["metadata"]["resourceVersion"] = "1"
        o["status"] = {}
        if o["kind"] == "Service":
            o["spec"].setdefault("clusterIP", "10.96.0.12")
        out.append(o)
    return out


def keys(objs: list[Obj]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objs]


def refs(prune: list[dict[str, str]]) -> list[str]:
    return [f"{r['kind']}/{r['name']}" for r in prune]


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def ready_pods(name: str, n: int) -> list[gluster.ServerPod]:
    return [gluster.ServerPod(f"{name}-gluster-{i}", f"10.0.2.{i}", True, f"node-{i}")
            for i in range(n)]


def converge(obj: Obj, **kw: Any) -> tuple[list[Obj], list[Plan]]:
    """Passes until nothing more is applied (at most 4), the server keeping what each
    applied: the objects held and the plans made."""
    held: list[Obj] = []
    plans = []
    for _ in range(4):
        p = plan(observed(obj, held, **kw))
        plans.append(p)
        if not p.apply:
            break
        done = {(o["kind"], o["metadata"]["name"]) for o in p.apply}
        held = [o for o in held if (o["kind"], o["metadata"]["name"]) not in done] + served(p)
    return held, plans


@pytest.mark.parametrize("case", sorted(GOOD))
def test_golden_passes(case: str) -> None:
    """Per type, pass by pass from nothing: applied objects, phase and why not Ready."""
    servers = ready_pods(GOOD[case]["metadata"]["name"], 4) if "gluster" in case else []
    _, plans = converge(storage(case), server_pods=servers)
    summary = [{"apply": keys(p.apply), "prune": refs(p.prune),
                "phase": p.status["phase"] if p.status else None,
                "ready": cond(p.status, conditions.READY)["message"] if p.status else None}
               for p in plans]
    check_golden(f"sharedstorage/plan-{case}.yaml", summary)
    assert not plans[-1].apply, "converges: the last pass applies nothing"


def test_first_pass_adds_the_finalizer_before_anything() -> None:
    p = plan(observed(storage("nfs-dedicated", finalizer=False)))
    assert p.add_finalizer and p.apply
    assert not plan(observed(storage("nfs-dedicated"))).add_finalizer


def test_nfs_client_volume_waits_for_the_service_address() -> None:
    first = plan(observed(storage("nfs-dedicated")))
    assert "PersistentVolume" not in {m["kind"] for m in first.apply}
    assert "Service raw-nfs has no ClusterIP yet" in cond(first.status or {}, "Ready")["message"]
    second = plan(observed(storage("nfs-dedicated"), served(first)))
    (pv,) = [m for m in second.apply if m["kind"] == "PersistentVolume"]
    assert pv["spec"]["nfs"]["server"] == "10.96.0.12"
    assert (second.status or {})["endpoint"] == "nfs://10.96.0.12:/data"


def test_drift_is_reapplied_and_nothing_else() -> None:
    held, _ = converge(storage("cvmfs-eks"))
    dep = next(o for o in held if o["kind"] == "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "squid:hand-edited"
    cm = next(o for o in held if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith(
        "-squid"))
    cm["data"]["squid.conf"] += "\nhttp_access allow all\n"
    p = plan(observed(storage("cvmfs-eks"), held))
    assert sorted(keys(p.apply)) == ["ConfigMap/software-squid", "Deployment/software-squid"]


def test_invalid_applies_and_prunes_nothing_and_names_the_field() -> None:
    for case_id, bad, where, text in BAD:
        if where != "invalid":
            continue
        obj = copy.deepcopy(bad)
        obj["metadata"]["finalizers"] = [names.FINALIZER_SHARED_STORAGE]
        stale = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "old", "namespace": "physics", "ownerReferences": [
                {"kind": names.SHAREDSTORAGE, "uid": "uid-ss"}]}}
        p = plan(observed(obj, [stale]))
        assert p.apply == [] and p.prune == [], case_id
        status = p.status or {}
        assert status["phase"] == "Failed", case_id
        assert text in cond(status, conditions.INVALID)["message"], case_id
        assert cond(status, conditions.READY)["status"] == "False", case_id


def test_prunes_only_what_this_storage_owns() -> None:
    held, _ = converge(storage("nfs-dedicated"))
    mine: Obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "raw-retired", "namespace": "physics", "labels": {names.LABEL_STORAGE: "raw"},
        "ownerReferences": [{"kind": names.SHAREDSTORAGE, "uid": "uid-ss"}]}}
    foreign = copy.deepcopy(mine)
    foreign["metadata"].update(name="raw-other", ownerReferences=[
        {"kind": names.SHAREDSTORAGE, "uid": "uid-of-an-earlier-raw"}])
    # A data claim kept by Retain from before, under a name no longer rendered: no owner.
    kept = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
        "name": "raw-nfs-data-v0", "namespace": "physics",
        "labels": {names.LABEL_STORAGE: "raw"}}}
    p = plan(observed(storage("nfs-dedicated"), [*held, mine, foreign, kept]))
    assert refs(p.prune) == ["ConfigMap/raw-retired"]
    data = next(o for o in held if o["metadata"]["name"] == "raw-nfs-data")
    assert "ownerReferences" not in data["metadata"], "Retain: the data claim has no owner"


def test_hpa_pruned_when_min_equals_max() -> None:
    held, _ = converge(storage("cvmfs-eks"))
    obj = storage("cvmfs-eks")
    obj["spec"]["cvmfs"]["squid"]["replicas"] = {"min": 3, "max": 3}
    p = plan(observed(obj, held))
    assert refs(p.prune) == ["HorizontalPodAutoscaler/software-squid"]
    (dep,) = [m for m in p.apply if m["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 3


def test_cvmfs_status_figures() -> None:
    held, _ = converge(storage("cvmfs-eks"))
    for o in held:
        if o["kind"] == "Deployment":
            o["status"] = {"readyReplicas": 2}
        if o["kind"] == "DaemonSet":
            o["status"] = {"desiredNumberScheduled": 40, "numberReady": 39}
        if o["kind"] == "Service":
            o["status"] = {"loadBalancer": {"ingress": [{"hostname": "nlb.example"}]}}
        if o["kind"] == "PersistentVolumeClaim":
            o["status"] = {"phase": "Bound"}
    p = plan(observed(storage("cvmfs-eks"), held,
                      squid=[SquidSample(1500.0, 1200.0), SquidSample(500.0, 300.0)]))
    status = p.status or {}
    assert status["squid"] == {"replicas": 2, "hitRatio": 0.75, "requestsPerMinute": 120000.0}
    assert status["clients"] == {"nodes": 40, "mounted": 39}
    assert {"name": "squid-lb", "url": "http://nlb.example:3128"} in status["endpoints"]
    assert cond(status, "Ready")["message"] == (
        "mounted on 39 of 40 nodes (a client that does not mount says why in its log: "
        "kubectl logs -n physics -l app.kubernetes.io/component=cvmfs-client,"
        "nightshift.io/storage=software --tail=20)")
    assert p.requeue_after, "not ready: look again soon"
    # No cache manager answered: replicas only, never a made-up hit ratio of 0.
    assert (plan(observed(storage("cvmfs-eks"), held)).status or {})["squid"] == {"replicas": 2}


def test_gluster_volume_job_once_every_server_is_ready() -> None:
    obj = storage("gluster-nufa")
    held, _ = converge(obj, server_pods=ready_pods("montage", 3))
    assert "Job" not in {o["kind"] for o in held}, "3 of 4 servers: no volume yet"
    p = plan(observed(obj, held, server_pods=ready_pods("montage", 4)))
    assert keys(p.apply) == ["Job/montage-gluster-volume"]
    job = p.apply[0]
    # Present: never re-applied (immutable template), never pruned, even if it differs.
    job["spec"]["template"]["spec"]["nodeName"] = "elsewhere"
    job["status"] = {"active": 1}
    again = plan(observed(obj, [*held, job], server_pods=ready_pods("montage", 4)))
    assert again.apply == [] and again.prune == []
    assert "making the volume (Job montage-gluster-volume)" in cond(
        again.status or {}, "Ready")["message"]
    job["status"] = {"failed": 4, "conditions": [{"type": "Failed", "status": "True"}]}
    failed = plan(observed(obj, [*held, job], server_pods=ready_pods("montage", 4)))
    assert "delete the Job to try again" in cond(failed.status or {}, "Ready")["message"]
    job["status"] = {"succeeded": 1}
    for o in held:
        if o["kind"] == "StatefulSet":
            o["status"] = {"readyReplicas": 4}
        if o["kind"] == "DaemonSet":
            o["status"] = {"desiredNumberScheduled": 4, "numberReady": 4}
        if o["kind"] == "PersistentVolumeClaim":
            o["status"] = {"phase": "Bound"}
    done = plan(observed(obj, [*held, job], server_pods=ready_pods("montage", 4)))
    assert (done.status or {})["phase"] == "Ready" and done.requeue_after is None


def test_gluster_server_pod_from_the_api_object() -> None:
    pod: Obj = {"metadata": {"name": "m-gluster-0"}, "spec": {"nodeName": "n0"},
           "status": {"podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert server_pod(pod) == gluster.ServerPod("m-gluster-0", "10.0.0.5", True, "n0")
    pod["metadata"]["deletionTimestamp"] = "2026-11-23T12:00:00Z"
    assert not server_pod(pod).ready


def test_s3_is_ready_at_once_and_makes_nothing() -> None:
    p = plan(observed(storage("s3")))
    assert p.apply == [] and (p.status or {})["phase"] == "Ready"
    assert (p.status or {})["endpoint"] == "s3://snfactory-raw/nights/"


def test_deletion_kept_while_runs_use_it() -> None:
    held, _ = converge(storage("nfs-dedicated"))
    obj = storage("nfs-dedicated", deletionTimestamp="2026-11-23T11:59:00Z")
    p = plan(observed(obj, held, running_runs=["nightly", "calib"]))
    assert not p.remove_finalizer and p.apply == [] and p.prune == [] and not p.gone
    status = p.status or {}
    assert status["phase"] == "Deleting"
    deleting = cond(status, DELETING)
    assert deleting["reason"] == "InUse" and "nightly, calib" in deleting["message"]
    assert "nightshift.io/force-delete=true" in deleting["message"]
    assert p.requeue_after


@pytest.mark.parametrize("forced", [False, True])
def test_deletion_removes_the_pv_and_its_claim_then_the_finalizer(forced: bool) -> None:
    held, _ = converge(storage("nfs-dedicated"))
    obj = storage("nfs-dedicated", deletionTimestamp="2026-11-23T11:59:00Z")
    runs = ["nightly"] if forced else []
    if forced:
        obj["metadata"]["annotations"] = {names.ANNOTATION_FORCE_DELETE: "true"}
    p = plan(observed(obj, held, running_runs=runs))
    assert p.remove_finalizer and p.gone
    assert sorted(refs(p.prune)) == [
        "PersistentVolume/physics-raw-nfs-9e1764", "PersistentVolumeClaim/raw-nfs-client"]
    # Owned objects (and, under Delete, the data claim) go with the object through the
    # garbage collector; the Retain'ed data claim is never deleted here.
    assert "PersistentVolumeClaim/raw-nfs-data" not in refs(p.prune)


def test_deleted_without_our_finalizer_is_gone() -> None:
    obj = storage("s3", finalizer=False, deletionTimestamp="2026-11-23T11:59:00Z")
    assert plan(observed(obj)).gone


def test_apply_errors_are_shown_and_not_repeated() -> None:
    first = plan(observed(storage("cvmfs-eks")))
    again = plan(replace(observed(storage("cvmfs-eks")), errors=(
        "Deployment/software-squid was refused by the API server (quota)",)))
    assert first.apply and again.apply == [] and again.prune == []
    assert "quota" in cond(again.status or {}, "Ready")["message"]


def test_unreadable_spec_says_upgrade() -> None:
    obj = storage("s3")
    obj["spec"]["s3"]["bucket"] = {"not": "a string"}
    status = plan(observed(obj)).status or {}
    assert "the CRD and the operator disagree" in cond(status, conditions.INVALID)["message"]
    assert "spec.s3.bucket" in cond(status, conditions.INVALID)["message"]


def test_time_comes_only_from_observed() -> None:
    a = plan(observed(storage("cvmfs-eks")))
    b = plan(observed(storage("cvmfs-eks")))
    assert a == b
    stamps = {c["lastTransitionTime"] for c in (a.status or {})["conditions"]}
    assert stamps == {"2026-11-23T12:00:00Z"}


def test_images_come_from_the_operators_registry_and_tag() -> None:
    p = plan(replace(observed(storage("gluster-nufa"), server_pods=ready_pods("montage", 4)),
                     image_registry="123456789012.dkr.ecr.eu-west-1.amazonaws.com/",
                     image_tag="1.2.3"))
    images = {c["image"] for m in p.apply
              for c in (m.get("spec", {}).get("template", {}).get("spec", {})
                        .get("containers", []))}
    assert images == {"123456789012.dkr.ecr.eu-west-1.amazonaws.com/nightshift-gluster:1.2.3"}
    local = plan(replace(observed(storage("cvmfs-local")), image_tag="dev"))
    assert {c["image"] for m in local.apply
            for c in m.get("spec", {}).get("template", {}).get("spec", {}).get(
                "containers", [])} == {"nightshift-squid:dev", "nightshift-cvmfs-client:dev"}


def test_nfs_service_readdressed_replaces_the_pv() -> None:
    held, _ = converge(storage("nfs-dedicated"))
    svc = next(o for o in held if o["kind"] == "Service")
    svc["spec"]["clusterIP"] = "10.96.0.99"
    p = plan(observed(storage("nfs-dedicated"), held))
    assert sorted(refs(p.prune)) == ["PersistentVolume/physics-raw-nfs-9e1764",
                                     "PersistentVolumeClaim/raw-nfs-client"]
    gone = [o for o in held if o["kind"] not in ("PersistentVolume",)
            and o["metadata"]["name"] != "raw-nfs-client"]
    (pv,) = [m for m in plan(observed(storage("nfs-dedicated"), gone)).apply
             if m["kind"] == "PersistentVolume"]
    assert pv["spec"]["nfs"]["server"] == "10.96.0.99"


@pytest.mark.parametrize("before, after", [("RO", "RW"), ("RW", "RO")])
def test_nfs_access_type_changed_replaces_the_pv(before: str, after: str) -> None:
    """The clients' PV source says readOnly, and a PV's source is immutable: a changed
    exportOptions.accessType replaces the PV (and its claim) as a new address does.
    Before, RO -> RW left every client mount read-only under a Ready storage."""
    def with_access(access: str) -> Obj:
        obj = storage("nfs-dedicated")
        obj["spec"]["nfs"]["exportOptions"] = {"accessType": access}
        return obj

    held, _ = converge(with_access(before))
    (pv,) = [o for o in held if o["kind"] == "PersistentVolume"]
    assert bool(pv["spec"]["nfs"].get("readOnly")) == (before == "RO")
    p = plan(observed(with_access(after), held))
    assert sorted(refs(p.prune)) == ["PersistentVolume/physics-raw-nfs-9e1764",
                                     "PersistentVolumeClaim/raw-nfs-client"]
    gone = [o for o in held if o["kind"] != "PersistentVolume"
            and o["metadata"]["name"] != "raw-nfs-client"]
    (pv,) = [m for m in plan(observed(with_access(after), gone)).apply
             if m["kind"] == "PersistentVolume"]
    assert bool(pv["spec"]["nfs"].get("readOnly")) == (after == "RO")
    held, _ = converge(with_access(after))
    assert not [r for r in plan(observed(with_access(after), held)).prune
                if r["kind"] == "PersistentVolume"], "settled: nothing replaced again"


def test_not_ready_names_pods_that_do_not_start_and_what_to_check() -> None:
    held, _ = converge(storage("cvmfs-eks"))
    stuck = [
        podstate.NotStarting("software-squid-7d9-x2", "Unschedulable",
                             "0/3 nodes are available: 3 node(s) didn't match Pod's node "
                             "affinity/selector."),
        podstate.NotStarting("software-cvmfs-client-q8", "ImagePullBackOff",
                             'Back-off pulling image "nightshift-cvmfs-client:1.0"', "client"),
    ]
    p = plan(observed(storage("cvmfs-eks"), held, pods_not_starting=stuck))
    message = cond(p.status or {}, "Ready")["message"]
    assert message.startswith(
        "pod software-squid-7d9-x2 is not scheduled: 0/3 nodes are available: 3 node(s) "
        "didn't match Pod's node affinity/selector.; check that spec.cvmfs.squid.pool and "
        "spec.cvmfs.client.pools have nodes that fit (set spec.virtualCluster, or label "
        "nodes nightshift.io/pool=<pool>); pod software-cvmfs-client-q8 container client: "
        'ImagePullBackOff: Back-off pulling image "nightshift-cvmfs-client:1.0"; check the '
        "operator's storage images (the chart's storageImages.registry and .tag)"), message


def test_squids_that_cannot_scale_say_why_and_stay_ready() -> None:
    held, _ = converge(storage("cvmfs-eks"))
    hpa = next(o for o in held if o["kind"] == "HorizontalPodAutoscaler")
    hpa["status"] = {"conditions": [
        {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale"},
        {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric",
         "message": "the HPA was unable to compute the replica count: failed to get cpu "
                    "utilization: unable to get metrics for resource cpu"}]}
    for o in held:  # every squid and mounter ready
        if o["kind"] == "Deployment":
            o["status"] = {"readyReplicas": o["spec"].get("replicas", 1)}
    squid = (plan(observed(storage("cvmfs-eks"), held)).status or {}).get("squid") or {}
    assert squid.get("scaling", "").startswith(
        "not scaling: FailedGetResourceMetric: the HPA was unable to compute the replica "
        "count: failed to get cpu utilization: unable to get metrics for resource cpu; the "
        "autoscaler reads CPU from the resource metrics API: install metrics-server"), squid
    hpa["status"]["conditions"][1].update(status="True", reason="ValidMetricFound")
    squid = (plan(observed(storage("cvmfs-eks"), held)).status or {}).get("squid") or {}
    assert "scaling" not in squid


def test_a_storage_long_not_ready_is_looked_at_less_often() -> None:
    """Not Ready for minutes (a pool with no node, a full quota): the reads that say why
    are made every minute, not every 10 s; the pods' and workloads' events still wake it."""
    held, _ = converge(storage("cvmfs-eks"))

    def since(minutes: float) -> Obj:
        at = (NOW - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
        obj = storage("cvmfs-eks")
        obj["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason":
                                         "NotReady", "message": "", "lastTransitionTime": at}]}
        return obj

    assert plan(observed(since(1), held)).requeue_after == 10.0
    assert plan(observed(since(6), held)).requeue_after == 60.0


def _pool_terms(p: Plan) -> dict[str, list[list[str]]]:
    """Each applied workload's node-affinity terms, as the label keys of each term."""
    out = {}
    for m in p.apply:
        spec = ((m.get("spec") or {}).get("template") or {}).get("spec") or {}
        node = (spec.get("affinity") or {}).get("nodeAffinity")
        if node:
            terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            out[f"{m['kind']}/{m['metadata']['name']}"] = [
                [e["key"] for e in t["matchExpressions"]] for t in terms]
    return out


@pytest.mark.parametrize("case", ["nfs-dedicated", "gluster-nufa", "cvmfs-eks"])
def test_on_a_karpenter_virtual_cluster_only_its_own_nodes_hold_the_storage(case: str) -> None:
    """As for stage pods: the hand-labeled term would admit another namespace's static
    nodes of the same pool name; static mode keeps it."""
    own = [names.LABEL_POOL, names.LABEL_VIRTUAL_CLUSTER, names.LABEL_VIRTUAL_CLUSTER_NAMESPACE]
    hand = [names.LABEL_POOL, names.LABEL_VIRTUAL_CLUSTER]
    by_mode = {mode: _pool_terms(plan(replace(observed(storage(case)), facts=replace(
        FACTS, virtual_cluster_modes={"snfactory": mode})))) for mode in ("karpenter", "static")}
    assert by_mode["karpenter"] and by_mode["karpenter"].keys() == by_mode["static"].keys()
    for workload in by_mode["karpenter"]:
        assert by_mode["karpenter"][workload] == [own], workload
        assert by_mode["static"][workload] == [own, hand], workload


def test_a_virtual_cluster_not_reconciled_yet_holds_the_storage() -> None:
    """Rendered before its status.mode, a server or client would be re-rendered (and its
    pods restarted) once the mode came; so nothing is applied or pruned until then."""
    waiting = replace(FACTS, virtual_cluster_modes={})
    ready = replace(FACTS, virtual_cluster_modes={"snfactory": "karpenter"})
    obj = storage("gluster-nufa")
    p = plan(replace(observed(obj), facts=waiting))
    assert (p.apply, p.prune) == ([], [])
    assert p.status is not None
    said = cond(p.status, "Ready")
    assert (said["status"], said["reason"]) == ("False", "NotReady")
    assert said["message"].startswith(
        "spec.virtualCluster: VirtualCluster 'snfactory' has no status.mode yet: the operator "
        "has not reconciled it"), said["message"]
    assert "kubectl describe virtualcluster snfactory" in said["message"]
    assert cond(p.status, "Invalid")["status"] == "False"
    assert p.requeue_after == 10.0
    # Made already (the VirtualCluster deleted and made again): kept, not pruned.
    made = served(plan(replace(observed(obj), facts=ready)))
    again = plan(replace(observed(obj, owned=made), facts=waiting))
    assert (again.apply, again.prune) == ([], [])
    # A storage that places nothing on pools (s3 runs no workload) does not wait.
    s3 = storage("s3")
    s3["spec"]["virtualCluster"] = "snfactory"
    s3_status = plan(replace(observed(s3), facts=waiting)).status
    assert s3_status is not None and cond(s3_status, "Ready")["status"] == "True"
