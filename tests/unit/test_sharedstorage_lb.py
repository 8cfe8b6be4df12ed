"""A cvmfs storage's LoadBalancer Service that gets no address says so in
status.squid.loadBalancer, with its controller's words when it has any, once its grace
is over; the storage stays Ready (clients in the cluster use the Service's DNS name)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nightshift.api import conditions as cond
from nightshift.api import names
from nightshift.kube import Obj
from nightshift.sharedstorage import reconcile as sharedstorage
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.observe import Sources, SquidSampler
from tests.unit.test_chart_kubecalls import RecordingKube

NS, NAME = "physics", "software"
NOW = datetime(2026, 11, 29, 9, 0, 0, tzinfo=UTC)


def _storage() -> Obj:
    return {"apiVersion": names.API_VERSION, "kind": names.SHAREDSTORAGE,
            "metadata": {"name": NAME, "namespace": NS, "uid": "ss-uid", "generation": 1,
                         "finalizers": [names.FINALIZER_SHARED_STORAGE]},
            "spec": {"type": "cvmfs", "cvmfs": {
                "repositories": ["demo.nightshift.io"], "client": {"pools": ["p"]},
                "squid": {"pool": "p", "upstreams": ["http://s1.example.org/cvmfs/@fqrn@"],
                          "service": {"type": "LoadBalancer"}}}}}


def _service(age_s: float, ingress: list[dict[str, str]] | None = None) -> Obj:
    made = (NOW - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{NAME}-squid", "namespace": NS, "uid": "svc-uid",
                         "creationTimestamp": made},
            "spec": {"type": "LoadBalancer"},
            "status": {"loadBalancer": {"ingress": ingress} if ingress else {}}}


def _event(reason: str, message: str, at: datetime, uid: str = "svc-uid") -> Obj:
    return {"reason": reason, "message": message, "type": "Warning",
            "lastTimestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "involvedObject": {"kind": "Service", "name": f"{NAME}-squid", "uid": uid}}


def test_no_address_within_the_grace_says_nothing_and_looks_again_when_it_ends() -> None:
    assert ssstatus.lb_problem(_service(60), [], NOW, 120, aws=True) is None
    assert ssstatus.lb_pending(_service(60), NOW) == 60
    assert ssstatus.lb_pending(_service(600, [{"hostname": "x.elb"}]), NOW) is None
    cluster_ip = {**_service(600), "spec": {"type": "ClusterIP"}}
    assert ssstatus.lb_pending(cluster_ip, NOW) is None


def test_the_newest_event_is_quoted_with_what_to_run() -> None:
    events = [_event("FailedBuildModel", "Failed build model due to unable to resolve at "
                     "least one subnet (0 match VPC and tags: [kubernetes.io/role/"
                     "internal-elb])", NOW - timedelta(seconds=30)),
              _event("EnsuringLoadBalancer", "Ensuring load balancer",
                     NOW - timedelta(seconds=170))]
    said = ssstatus.lb_problem(_service(180), events, NOW, 120, aws=True)
    assert said == (
        "LoadBalancer Service software-squid has no address after 2 minutes: "
        "FailedBuildModel: Failed build model due to unable to resolve at least one subnet "
        "(0 match VPC and tags: [kubernetes.io/role/internal-elb]); kubectl describe "
        "service -n physics software-squid; clients in the cluster use its DNS name and "
        "are not affected; if no client outside the cluster needs the squids, set "
        "spec.cvmfs.squid.service.type to ClusterIP"), said


def test_no_event_says_which_controller_gives_the_address() -> None:
    aws = ssstatus.lb_problem(_service(180), [], NOW, 120, aws=True) or ""
    assert "no controller has said why: on EKS the AWS Load Balancer Controller" in aws
    local = ssstatus.lb_problem(_service(180), [], NOW, 120, aws=False) or ""
    assert "(MetalLB, cloud-provider-kind)" in local and "EKS" not in local


def _pass(kube: RecordingKube, grace: float = 120) -> dict[str, Any]:
    ctx = sharedstorage.Context(kube, Sources(
        sampler=SquidSampler(fetch=lambda url, t: ""), cluster_cidrs=("10.0.0.0/16",),
        load_balancer_grace=grace))
    sharedstorage.reconcile(ctx, NS, NAME, sharedstorage.LoopState())
    got = kube.store[kube.path(names.API_VERSION, names.SHAREDSTORAGE, NS, NAME)]
    return dict(got.get("status") or {})


def _ready(kube: RecordingKube) -> None:
    """What the controllers would do: every squid and mounter ready."""
    for obj in kube.store.values():
        if obj["kind"] == "Deployment":
            obj["status"] = {"readyReplicas": 1, "replicas": 1}
        elif obj["kind"] == "DaemonSet":
            obj["status"] = {"desiredNumberScheduled": 1, "numberReady": 1}
        elif obj["kind"] == "PersistentVolumeClaim":
            obj["status"] = {"phase": "Bound"}


def test_a_pass_reads_the_services_events_only_past_the_grace() -> None:
    kube = RecordingKube([_storage()])
    _pass(kube)  # applies the squids, the Service, the clients
    _ready(kube)
    svc_path = kube.path("v1", "Service", NS, f"{NAME}-squid")
    svc = kube.store[svc_path]
    svc["metadata"]["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.put({"apiVersion": "v1", "kind": "Event",
              "metadata": {"name": "lb.1", "namespace": NS},
              **_event("SyncLoadBalancerFailed", "Error syncing load balancer: failed to "
                       "ensure load balancer: AccessDenied", datetime.now(UTC),
                       uid=str(svc["metadata"]["uid"]))})
    kube.calls.clear()
    status = _pass(kube)
    assert status["phase"] == "Ready", status
    assert "loadBalancer" not in status["squid"], status
    assert ("", "events", "list", "namespace") not in kube.calls, "no read within the grace"
    status = _pass(kube, grace=0)
    assert status["phase"] == "Ready", status  # the squids serve the cluster meanwhile
    ready = cond.find(status["conditions"], cond.READY)
    assert ready is not None and ready["status"] == cond.TRUE
    assert status["squid"]["loadBalancer"].startswith(
        "LoadBalancer Service software-squid has no address after 0 s: "
        "SyncLoadBalancerFailed: Error syncing load balancer: failed to ensure load "
        "balancer: AccessDenied; kubectl describe service -n physics software-squid"), status
    # The controller gives it an address: the field goes, the endpoint lists it.
    svc["status"] = {"loadBalancer": {"ingress": [{"hostname": "k8s-sw.elb.amazonaws.com"}]}}
    status = _pass(kube, grace=0)
    assert "loadBalancer" not in status["squid"], status
    assert "k8s-sw.elb.amazonaws.com" in str(status["endpoints"]), status
