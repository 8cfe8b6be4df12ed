"""A not-Ready SharedStorage says why, from the real parts' words:

- pods the API server refuses: the squid Deployment's ReplicaFailure condition (a full
  ResourceQuota) and the client DaemonSet's FailedCreate events (the namespace's Pod
  Security level refusing a privileged mounter); mended, the storage becomes Ready;
- a daemon that keeps exiting: a real squid refusing its squid.conf on the real node,
  its CrashLoopBackOff and last words as the kubelet reports them.
"""

from __future__ import annotations

from typing import Any

from nightshift.api import podstate
from nightshift.kube import Kube
from nightshift.sharedstorage import squid
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.objects import Storage
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.realstorage import REPO, TAG, need_image, place
from tests.integration.test_real_node import real_node
from tests.integration.test_sharedstorage import (
    condition,
    get,
    kwok_pool,
    ns,
    storage,
    storage_operator,
    wait_ready,
)

__all__ = ["kwok_pool", "ns", "real_node", "storage_operator"]  # fixtures, used by name


def test_refused_servers_and_mounters_are_named_then_mended(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str) -> None:
    # PodSecurity admits or refuses before ResourceQuota counts: the privileged client
    # DaemonSet meets the first, the squid Deployment the second.
    kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
    kubectl.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "none"},
                   "spec": {"hard": {"pods": "0"}}}, ns)
    kubectl.apply(storage(ns, "software", {
        "type": "cvmfs",
        "cvmfs": {"repositories": ["demo.nightshift.io"], "client": {"pools": [kwok_pool]},
                  "squid": {"pool": kwok_pool,
                            "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"]}}}))

    def both() -> str | None:
        message = str(condition(get(kube, ns, "software"), "Ready").get("message", ""))
        return message if ("Deployment software-squid cannot" in message
                           and "DaemonSet software-cvmfs-client cannot" in message) else None

    message = wait_for("both refusals on Ready", both, 120,
                       explain=lambda: str(get(kube, ns, "software").get("status")))
    assert ("Deployment software-squid cannot create its pods: exceeded quota: none, "
            "requested: pods=1, limited: pods=0; its pods are created as the namespace's "
            "ResourceQuota frees up; else raise it") in message, message
    assert ('DaemonSet software-cvmfs-client cannot create its pods: violates PodSecurity '
            '"baseline:latest": ') in message, message
    assert ("the storage's servers and mounters need a namespace whose "
            "pod-security.kubernetes.io/enforce level admits them") in message, message
    assert condition(get(kube, ns, "software"), "Ready")["status"] == "False"
    print(message)  # what a user sees, for `pytest -s`
    # Mended: the controllers' retries make the pods, and the refusals go.
    kubectl("-n", ns, "delete", "resourcequota", "none")
    kubectl("label", "--overwrite", "namespace", ns,
            "pod-security.kubernetes.io/enforce=privileged")
    obj = wait_ready(kube, storage_operator, ns, "software")
    assert "cannot create" not in str(obj["status"]), obj["status"]


def test_real_squid_that_refuses_its_config_is_a_named_crash_loop(
        real_node: dict[str, Any], kube: Kube, kubectl: Kubectl, namespace: str) -> None:
    need_image(real_node, f"{squid.IMAGE}:{TAG}")
    st = Storage.of({"metadata": {"name": "sw", "namespace": namespace, "uid": "u"},
                     "spec": {"type": "cvmfs", "cvmfs": {
                         "repositories": [REPO], "client": {"pools": ["none"]},
                         "squid": {"upstreams": ["http://192.0.2.1/cvmfs/@fqrn@"],
                                   "memoryCache": "64Mi", "diskCache": "1Gi",
                                   "cpu": "100m"}}}})
    for obj in place(squid.render_squid(st, platform="local", allowed_cidrs=["10.0.0.0/8"])):
        if obj["kind"] == "ConfigMap":  # a value squid cannot parse: it exits at start
            obj["data"]["squid.conf"] += "cache_mem lots\n"
        kubectl.apply(obj)

    def looping() -> podstate.NotStarting | None:
        for pod in kube.list("v1", "Pod", namespace, field_selector="status.phase=Running"):
            if (found := podstate.crash_looping(pod)) is not None:
                return found
        return None

    found = wait_for("the squid in CrashLoopBackOff", looping, 150, interval=2,
                     explain=lambda: kubectl("get", "pods", "-n", namespace, "-o", "wide",
                                             check=False).stdout)
    assert found.container == "squid" and found.pod.startswith("sw-squid-"), found
    assert found.message.startswith("it exits with code "), found
    # FallbackToLogsOnError: squid's own last words are in the pod's status.
    assert "FATAL: " in found.message and "cache_mem lots" in found.message, found
    (line,) = ssstatus.pods_not_starting("cvmfs", [found], namespace)
    print(line)  # what a user sees, for `pytest -s`
    assert line.endswith(f"kubectl logs -n {namespace} {found.pod} -c squid --previous; "
                         "check spec.cvmfs"), line


def test_squids_that_cannot_scale_say_why(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str) -> None:
    """This bed has no metrics-server, as a fresh EKS cluster has none: the real HPA
    controller cannot read the squids' CPU, and the storage says so (still Ready)."""
    kubectl.apply(storage(ns, "software", {
        "type": "cvmfs",
        "cvmfs": {"repositories": ["demo.nightshift.io"], "client": {"pools": [kwok_pool]},
                  "squid": {"pool": kwok_pool, "replicas": {"min": 1, "max": 3},
                            "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"]}}}))
    scaling = wait_for("status.squid.scaling", lambda: (
        get(kube, ns, "software").get("status") or {}).get("squid", {}).get("scaling"), 150,
        explain=lambda: str(get(kube, ns, "software").get("status")))
    print(scaling)  # what a user sees, for `pytest -s`
    assert scaling.startswith("not scaling: FailedGetResourceMetric: "), scaling
    assert ("install metrics-server (on EKS, its add-on); kubectl describe hpa -n "
            f"{ns} software-squid") in scaling, scaling
    obj = wait_ready(kube, storage_operator, ns, "software")
    assert obj["status"]["squid"]["scaling"] == scaling


def test_an_export_disk_no_provisioner_makes_names_the_class(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str) -> None:
    """A StorageClass whose provisioner does not run here (as gp3 without the EBS CSI
    driver): the real PV controller's words about the data claim reach Ready."""
    klass = f"nowhere-{ns}"
    kubectl.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                   "metadata": {"name": klass}, "provisioner": "example.com/nowhere",
                   "volumeBindingMode": "Immediate"})
    try:
        kubectl.apply(storage(ns, "raw", {
            "type": "nfs",
            "nfs": {"server": "dedicated", "pool": kwok_pool,
                    "backing": {"pvc": {"size": "1Gi", "storageClass": klass}},
                    "clients": {"pools": [kwok_pool]}}}))

        def said() -> str | None:
            message = str(condition(get(kube, ns, "raw"), "Ready").get("message", ""))
            return message if "claim raw-nfs-data (the export's disk) is not bound: " \
                in message else None

        message = wait_for("the data claim's reason on Ready", said, 90,
                           explain=lambda: str(get(kube, ns, "raw").get("status")))
        print(message)  # what a user sees, for `pytest -s`
        assert "example.com/nowhere" in message, message
        assert "check spec.nfs.backing.pvc.storageClass: its provisioner must run in the " \
               "cluster" in message, message
        # The server pod waits on that claim: not sent to look at the pools.
        assert "nodes that fit" not in message, message
    finally:
        kubectl("delete", "storageclass", klass, check=False)


def test_a_stuck_squid_rollout_is_not_ready_with_its_new_pods_reason(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str) -> None:
    """The old squid keeps serving while its replacement finds no node: the real
    Deployment controller's deadline says the rollout is stuck, and the storage says why
    instead of Ready with a change that never lands."""
    spec = {"type": "cvmfs",
            "cvmfs": {"repositories": ["demo.nightshift.io"], "client": {"pools": [kwok_pool]},
                      "squid": {"pool": kwok_pool, "replicas": {"min": 1, "max": 1},
                                "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"]}}}
    kubectl.apply(storage(ns, "software", spec))
    wait_ready(kube, storage_operator, ns, "software")
    # The default deadline is 10 minutes; the operator renders none, so this one stays.
    kubectl("-n", ns, "patch", "deployment", "software-squid", "--type=merge", "-p",
            '{"spec": {"progressDeadlineSeconds": 10}}')
    spec["cvmfs"]["squid"]["pool"] = "no-such-pool"  # type: ignore[index]
    kubectl.apply(storage(ns, "software", spec))

    def stuck() -> str | None:
        message = str(condition(get(kube, ns, "software"), "Ready").get("message", ""))
        return message if ("Deployment software-squid's rollout is stuck, its old pods "
                           "still serving: " in message
                           and "is not scheduled" in message) else None

    message = wait_for("the stuck rollout and its pod's reason on Ready", stuck, 120,
                       explain=lambda: str(get(kube, ns, "software").get("status")))
    print(message)  # what a user sees, for `pytest -s`
    assert "has timed out progressing" in message, message
    assert "spec.cvmfs.squid.pool" in message, message
