"""Pods the API server refuses, read from their controllers' words (api/refusals.py), and
a SharedStorage whose servers or mounters are refused says so on its Ready condition, with
what to check, instead of "0 of 1 servers ready"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.api import names, podstate, refusals
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.observe import Sources, SquidSampler, observe
from nightshift.sharedstorage.plan import plan
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_sharedstorage_plan import cond, converge, observed, storage

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PSA = ('pods "software-cvmfs-client-x7" is forbidden: violates PodSecurity '
       '"baseline:latest": privileged (container "client" must not set '
       "securityContext.privileged=true)")
QUOTA = ('pods "software-squid-7d9f-abcde" is forbidden: exceeded quota: storage, requested: '
         "cpu=500m, used: cpu=3800m, limited: cpu=4")


def event(message: str, ago: float = 5.0, reason: str = refusals.FAILED_CREATE
          ) -> dict[str, Any]:
    when = (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"reason": reason, "message": message, "lastTimestamp": when}


@pytest.mark.parametrize("message", [
    f"Error creating: {PSA}",  # the Job, ReplicaSet and DaemonSet controllers
    f"create Pod software-gluster-0 in StatefulSet software-gluster failed error: {PSA}",
    f"(combined from similar events): Error creating: {PSA}",
])
def test_each_controllers_words_give_the_same_refusal(message: str) -> None:
    got = refusals.refusal(event(message))
    assert got is not None and got[1] == (
        'violates PodSecurity "baseline:latest": privileged (container "client" must not '
        "set securityContext.privileged=true)")


def test_what_changes_between_retries_is_left_out() -> None:
    assert refusals.clean(QUOTA) == ("exceeded quota: storage, requested: cpu=500m, "
                                     "limited: cpu=4")
    assert refusals.refusal(event("Created pod: x", reason="SuccessfulCreate")) is None
    assert refusals.refusal(event("something else", reason=refusals.FAILED_CREATE)) is None


def test_the_newest_recent_refusal_wins() -> None:
    events = [event(f"Error creating: {QUOTA}", ago=30), event(f"Error creating: {PSA}", ago=5)]
    got = refusals.newest(events, NOW)
    assert got is not None and refusals.kind(got[1]) == "podsecurity"
    assert refusals.newest([event(f"Error creating: {PSA}", ago=601)], NOW) is None
    assert refusals.newest(events, NOW, after=NOW - timedelta(seconds=10)) == got
    assert refusals.newest(events, NOW, after=NOW) is None


@pytest.mark.parametrize(("said", "kind"), [
    ("exceeded quota: storage, requested: pods=1, limited: pods=4", "quota"),
    ('violates PodSecurity "restricted:latest": ...', "podsecurity"),
    ("maximum cpu usage per Container is 500m, but limit is 1", "limitrange"),
    ("minimum memory usage per Pod is 1Gi, but request is 128Mi", "limitrange"),
    ('admission webhook "policy.example.org" denied the request', "other"),
])
def test_which_guard_refused(said: str, kind: str) -> None:
    assert refusals.kind(said) == kind


def deployment(**cond_: Any) -> dict[str, Any]:
    return {"kind": "Deployment", "status": {"conditions": [
        {"type": "Available", "status": "False"}, {"type": "ReplicaFailure", **cond_}]}}


def test_a_deployments_refusal_is_its_replica_failure_condition() -> None:
    assert refusals.replica_failure(deployment(status="True", reason="FailedCreate",
                                               message=QUOTA)) == (
        "exceeded quota: storage, requested: cpu=500m, limited: cpu=4")
    assert refusals.replica_failure(deployment(status="False", reason="FailedCreate")) is None
    assert refusals.replica_failure({"kind": "Deployment", "status": {}}) is None


@pytest.mark.parametrize(("obj", "short"), [
    ({"kind": "StatefulSet", "spec": {"replicas": 3}, "status": {"readyReplicas": 2}}, True),
    ({"kind": "StatefulSet", "spec": {"replicas": 3}, "status": {"readyReplicas": 3}}, False),
    ({"kind": "DaemonSet", "status": {"desiredNumberScheduled": 4, "numberReady": 0}}, True),
    ({"kind": "DaemonSet", "status": {"desiredNumberScheduled": 4, "numberReady": 4}}, False),
    ({"kind": "DaemonSet", "status": {}}, False),  # no node to run on: nothing refused
    ({"kind": "Job", "status": {}}, True),
    ({"kind": "Job", "status": {"active": 1}}, False),
    ({"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}}, False),
    ({"kind": "Deployment", "status": {}}, False),  # its ReplicaFailure says it
])
def test_which_workloads_are_short_of_pods(obj: dict[str, Any], short: bool) -> None:
    assert ssstatus.short(obj) is short


def test_ready_names_refused_workloads_with_what_to_check() -> None:
    held, _ = converge(storage("cvmfs-eks"))
    squid = next(o for o in held if o["kind"] == "Deployment")
    squid["status"] = {"conditions": [{"type": "ReplicaFailure", "status": "True",
                                       "reason": "FailedCreate", "message": QUOTA}]}
    refused = [("DaemonSet", "software-cvmfs-client", refusals.clean(PSA))]
    p = plan(observed(storage("cvmfs-eks"), held, pods_refused=refused))
    message = cond(p.status or {}, "Ready")["message"]
    name = squid["metadata"]["name"]
    assert (f"Deployment {name} cannot create its pods: exceeded quota: storage, requested: "
            "cpu=500m, limited: cpu=4; its pods are created as the namespace's "
            "ResourceQuota frees up; else raise it") in message, message
    assert ('DaemonSet software-cvmfs-client cannot create its pods: violates PodSecurity '
            '"baseline:latest": privileged (container "client" must not set '
            "securityContext.privileged=true); the storage's servers and mounters need a "
            "namespace whose pod-security.kubernetes.io/enforce level admits them") in message
    assert p.status is not None and p.status["phase"] == "Pending"


def test_observe_reads_the_refusals_of_short_workloads_only_while_not_ready() -> None:
    obj = storage("gluster-nufa", uid="storage-uid")
    held, _ = converge(storage("gluster-nufa"))
    kube = RecordingKube([obj, *held])
    ns = obj["metadata"]["namespace"]
    servers = next(o for o in kube.store.values() if o["kind"] == "StatefulSet")
    servers["status"] = {"readyReplicas": 0}
    for o in kube.store.values():
        if o["kind"] == "DaemonSet":
            o["status"] = {"desiredNumberScheduled": 0}  # no client node yet: not short
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.put({"apiVersion": "v1", "kind": "Event",
              "metadata": {"name": "gluster.1", "namespace": ns},
              "involvedObject": {"kind": "StatefulSet", "uid": servers["metadata"]["uid"]},
              "reason": "FailedCreate", "lastTimestamp": now,
              "message": f"create Pod {servers['metadata']['name']}-0 in StatefulSet "
                         f"{servers['metadata']['name']} failed error: {PSA}"})
    sources = Sources(sampler=SquidSampler(fetch=lambda url, t: ""))
    got = observe(kube, sources, ns, obj["metadata"]["name"], datetime.now(UTC))
    assert got is not None
    assert [(k, n) for k, n, _ in got.pods_refused] == [
        ("StatefulSet", servers["metadata"]["name"])]
    kube.calls.clear()
    path = kube.path(obj["apiVersion"], obj["kind"], ns, obj["metadata"]["name"])
    kube.store[path]["status"] = {"phase": "Ready"}
    got = observe(kube, sources, ns, obj["metadata"]["name"], datetime.now(UTC))
    assert got is not None and not got.pods_refused
    assert ("", "events", "list", "namespace") not in kube.calls


def test_observe_reads_only_the_jobs_refusals_while_deleting() -> None:
    obj = storage("gluster-nufa", uid="storage-uid", deletionTimestamp="2026-11-29T11:00:00Z")
    held, _ = converge(storage("gluster-nufa"))
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    reclaiming = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": f"{name}-reclaim-0", "namespace": ns, "labels": {names.LABEL_STORAGE: name}}}
    kube = RecordingKube([obj, *held, reclaiming])
    servers = next(o for o in kube.store.values() if o["kind"] == "StatefulSet")
    job = next(o for o in kube.store.values() if o["kind"] == "Job")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for target in (servers, job):
        kube.put({"apiVersion": "v1", "kind": "Event",
                  "metadata": {"name": f"{target['metadata']['name']}.1", "namespace": ns},
                  "involvedObject": {"kind": target["kind"], "uid": target["metadata"]["uid"]},
                  "reason": "FailedCreate", "lastTimestamp": now,
                  "message": f"Error creating: {QUOTA}"})
    sources = Sources(sampler=SquidSampler(fetch=lambda url, t: ""))
    got = observe(kube, sources, ns, obj["metadata"]["name"], datetime.now(UTC))
    assert got is not None
    assert [(k, n) for k, n, _ in got.pods_refused] == [("Job", job["metadata"]["name"])]


def test_a_pending_claim_says_its_provisioners_words_not_its_normal_waits() -> None:
    waiting = event("waiting for first consumer to be created before binding", ago=50,
                    reason="WaitForFirstConsumer")
    external = event("Waiting for a volume to be created either by the external provisioner "
                     "'ebs.csi.aws.com' or manually by the system administrator.", ago=20,
                     reason="ExternalProvisioning")
    assert ssstatus.claim_says([waiting]) is None
    assert ssstatus.claim_says([waiting, external]) == external["message"]
    held, _ = converge(storage("nfs-dedicated"))
    p = plan(observed(storage("nfs-dedicated"), held,
                      claims_waiting={"raw-nfs-data": external["message"]}))
    message = cond(p.status or {}, "Ready")["message"]
    assert ("claim raw-nfs-data (the export's disk) is not bound: Waiting for a volume to be "
            "created either by the external provisioner 'ebs.csi.aws.com' or manually by "
            "the system administrator.; check spec.nfs.backing.pvc.storageClass: its "
            "provisioner must run in the cluster") in message, message


def test_a_pod_waiting_on_its_claim_is_not_sent_to_the_pools() -> None:
    (line,) = ssstatus.pods_not_starting("nfs", [podstate.NotStarting(
        "raw-nfs-7bc-b4", "Unschedulable",
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.")])
    assert line.endswith("it waits for its claim to be bound (the claim's reason is given "
                         "here)"), line


def test_a_squid_whose_disk_cache_fits_no_node_names_the_two_fixes() -> None:
    said = ("0/3 nodes are available: 3 Insufficient ephemeral-storage. preemption: 0/3 "
            "nodes are available: 3 No preemption victims found for incoming pod.")
    (line,) = ssstatus.pods_not_starting("cvmfs", [podstate.NotStarting(
        "software-squid-5d9-x2", "Unschedulable", said)])
    assert line.endswith("no node of its pool has the disk it requests: lower "
                         "spec.cvmfs.squid.diskCache (requested as ephemeral storage), or "
                         "give the pool's nodes a larger root volume (the VirtualCluster's "
                         "nodeClass.blockDeviceMappings)"), line


def test_a_stuck_rollout_is_a_reason_though_old_pods_serve() -> None:
    held, _ = converge(storage("cvmfs-eks"))
    squid = next(o for o in held if o["kind"] == "Deployment")
    squid["status"] = {"readyReplicas": 2, "conditions": [
        {"type": "Available", "status": "True"},
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": 'ReplicaSet "software-squid-7cc" has timed out progressing.'}]}
    message = cond(plan(observed(storage("cvmfs-eks"), held)).status or {}, "Ready")["message"]
    assert (f"Deployment {squid['metadata']['name']}'s rollout is stuck, its old pods still "
            'serving: ReplicaSet "software-squid-7cc" has timed out progressing.') in message
    squid["status"]["conditions"][1].update(status="True", reason="NewReplicaSetAvailable")
    message = cond(plan(observed(storage("cvmfs-eks"), held)).status or {}, "Ready")["message"]
    assert "rollout is stuck" not in message
