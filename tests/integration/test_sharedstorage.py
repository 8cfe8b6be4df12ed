"""SharedStorages on the local cluster, with the operator as a process (KWOK pods only:
API-server admission and the operator's reconcile, not the storage daemons; those are
tests/integration/test_sharedstorage_real.py's and test_gluster_real.py's).

- Bad input: the CRD's CEL refuses what it can; the rest gets an Invalid condition
  naming the field, and nothing is made.
- Each type's workloads are accepted by the API server and converge: cvmfs (squid
  Deployment, LoadBalancer Service, HPA, client DaemonSet), glusterfs (StatefulSet,
  client DaemonSet, the volume Job once its servers are ready), nfs (the clients'
  PersistentVolume once the Service has its address, bound to its claim:
  test_sharedstorage_nfs.py); a hand edit is restored; deletion removes the PV and the
  finalizer.
- An s3 SharedStorage used by runs against versitygw: test_sharedstorage_s3.py.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nightshift.api import names
from nightshift.kube import Kube
from tests.bad_sharedstorages import BAD, POOLS, VC
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import SESSION, Cluster, OperatorProcess, make_namespace
from tests.integration.prutil import (
    jobs,
    kwok_node_pool,
    pipelinerun,
    stage,
)

CEL = [(i, m, s) for i, m, kind, s in BAD if kind == "cel"]
INVALID = [(i, m, s) for i, m, kind, s in BAD if kind == "invalid"]
# This module's operator watches only these namespaces: it needs the cluster's ranges
# (NIGHTSHIFT_CLUSTER_CIDRS) that the session's operator is not given.
PREFIX = f"ss-{SESSION}"
CLUSTER_CIDRS = "10.0.0.0/16,100.64.0.0/16"
LB_GRACE = 3


@pytest.fixture(scope="module")
def storage_operator(cluster: Cluster, crds: list[str],
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("ss-operator") / "operator.log"
    # A load balancer's grace of seconds, not minutes: no controller gives one here.
    op = OperatorProcess(cluster, log, {"NIGHTSHIFT_CLUSTER_CIDRS": CLUSTER_CIDRS,
                                        "NIGHTSHIFT_LB_GRACE": str(LB_GRACE)},
                         namespace=f"{PREFIX}-*")
    op.start()
    yield op
    op.stop()


@pytest.fixture
def ns(kubectl: Kubectl) -> Iterator[str]:
    name = make_namespace(kubectl.kube, f"{PREFIX}-{uuid.uuid4().hex[:6]}")
    yield name
    # While this module's operator still runs: our finalizers go with their objects.
    kube = kubectl.kube
    for kind in (names.SHAREDSTORAGE, names.PIPELINERUN, names.VIRTUALCLUSTER):
        def left(kind: str = kind) -> list[dict[str, Any]]:
            return kube.list(names.API_VERSION, kind, name)
        for obj in left():
            kube.delete(names.API_VERSION, kind, obj["metadata"]["name"], name)
        try:
            wait_for(f"every {kind} in {name} gone", lambda: not left(), 60)
        except AssertionError:  # the operator did not finish: strip what holds them
            for obj in left():
                kube.merge_patch(names.API_VERSION, kind, obj["metadata"]["name"], name,
                                 {"metadata": {"finalizers": None}})
    kube.delete("v1", "Namespace", name)


@pytest.fixture
def kwok_pool(kubectl: Kubectl, ns: str) -> Iterator[str]:
    name = f"p-{ns}"
    node = kwok_node_pool(name)
    # An address: host-network pods (gluster servers) get it as their IP, as on a real
    # node; without one KWOK leaves their podIP empty.
    octet = int(uuid.uuid4().hex[:2], 16)
    node["status"]["addresses"] = [{"type": "InternalIP", "address": f"10.0.250.{octet}"},
                                   {"type": "Hostname", "address": f"kwok-{name}"}]
    kubectl.apply(node)
    yield name
    kubectl.kube.delete("v1", "Node", f"kwok-{name}")


def _in(ns: str, manifest: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    m = copy.deepcopy(manifest)
    m["metadata"]["namespace"] = ns
    for k in ("uid", "generation"):
        m["metadata"].pop(k, None)
    if name:
        m["metadata"]["name"] = name
    return m


def storage(ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.SHAREDSTORAGE,
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def get(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    obj = kube.get(names.API_VERSION, names.SHAREDSTORAGE, name, ns)
    assert obj is not None, f"SharedStorage {ns}/{name} is gone"
    return obj


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conds if c["type"] == type_), {})


# KWOK marks pods ready 1-6 s after they start, longer on a loaded cluster.
READY_TIMEOUT = 180


def wait_ready(kube: Kube, op: OperatorProcess, ns: str, name: str,
               timeout: float = READY_TIMEOUT) -> dict[str, Any]:
    try:
        result: dict[str, Any] = wait_for(f"SharedStorage {name} Ready", lambda: (
            o := get(kube, ns, name)) and (o.get("status") or {}).get("phase") == "Ready"
            and o, timeout)
    except AssertionError:
        raise AssertionError(f"{name} never Ready: {get(kube, ns, name).get('status')}\n"
                             f"{op.tail()}") from None
    return result


def owned(kube: Kube, ns: str, name: str, kind: tuple[str, str]) -> list[dict[str, Any]]:
    return kube.list(kind[0], kind[1], ns, label_selector=f"{names.LABEL_STORAGE}={name}")


KINDS = [("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment"),
         ("apps/v1", "DaemonSet"), ("apps/v1", "StatefulSet"), ("batch/v1", "Job"),
         ("autoscaling/v2", "HorizontalPodAutoscaler"), ("v1", "PersistentVolumeClaim")]


def gone(kube: Kube, ns: str, name: str) -> bool:
    return kube.get(names.API_VERSION, names.SHAREDSTORAGE, name, ns) is None


@pytest.mark.parametrize(("case", "manifest", "expected"), CEL, ids=[c[0] for c in CEL])
def test_refused_by_the_api_server(case: str, manifest: dict[str, Any], expected: str,
                                   kubectl: Kubectl, crds: list[str], namespace: str) -> None:
    r = kubectl.apply_as_user(_in(namespace, manifest))
    assert r.returncode != 0, f"{case}: the API server accepted it"
    assert expected in r.stderr, f"{case}: expected {expected!r} in:\n{r.stderr}"


def test_invalid_gets_a_condition_naming_the_field_and_nothing_is_made(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str) -> None:
    # The VirtualCluster the cases name (static: no NodePools), no gp2/gp3 classes here.
    kubectl.apply({"apiVersion": names.API_VERSION, "kind": names.VIRTUALCLUSTER,
                   "metadata": {"name": VC, "namespace": ns},
                   "spec": {"provider": "static",
                            "pools": [{"name": p, "class": "general"} for p in POOLS]}})
    for case, manifest, _ in INVALID:
        kubectl.apply(_in(ns, manifest, name=case[:40]))
    for case, _, expected in INVALID:
        name = case[:40]

        def invalid_true(n: str = name) -> dict[str, Any] | None:
            c = condition(get(kube, ns, n), "Invalid")
            return c if c.get("status") == "True" else None

        invalid = wait_for(f"{case}: Invalid=True", invalid_true, 60)
        assert expected in invalid["message"], f"{case}: {invalid['message']!r}"
        obj = get(kube, ns, name)
        assert obj["status"]["phase"] == "Failed"
        assert condition(obj, "Ready")["status"] == "False"
        made = [o["metadata"]["name"] for k in KINDS for o in owned(kube, ns, name, k)]
        assert made == [], f"{case}: an invalid storage made {made}"
    pvs = kube.list("v1", "PersistentVolume",
                    label_selector=f"{names.LABEL_STORAGE_NAMESPACE}={ns}")
    assert pvs == []


def test_cvmfs_squids_hpa_lb_and_clients(kube: Kube, kubectl: Kubectl,
                                         storage_operator: OperatorProcess, ns: str,
                                         kwok_pool: str) -> None:
    kubectl.apply(storage(ns, "software", {
        "type": "cvmfs",
        "cvmfs": {"repositories": ["sft.cern.ch", "demo.nightshift.io"],
                  "client": {"pools": [kwok_pool]},
                  "squid": {"pool": kwok_pool, "replicas": {"min": 1, "max": 4},
                            "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"],
                            "service": {"type": "LoadBalancer"}}}}))
    obj = wait_ready(kube, storage_operator, ns, "software")
    st = obj["status"]
    assert st["clients"] == {"nodes": 1, "mounted": 1}
    assert st["squid"]["replicas"] == 1
    assert st["endpoint"] == f"http://software-squid.{ns}.svc.cluster.local:3128"
    assert names.FINALIZER_SHARED_STORAGE in obj["metadata"]["finalizers"]
    (svc,) = owned(kube, ns, "software", ("v1", "Service"))
    assert svc["spec"]["type"] == "LoadBalancer"
    # No allowedCIDRs: the squids serve the cluster's ranges (NIGHTSHIFT_CLUSTER_CIDRS).
    assert svc["spec"]["loadBalancerSourceRanges"] == CLUSTER_CIDRS.split(",")
    _load_balancer_said(kube, kubectl, ns, svc)
    _a_stage_off_its_client_pools_waits(kube, kubectl, ns)
    _a_client_change_is_outdated_until_its_pod_goes(kube, kubectl, ns)
    (hpa,) = owned(kube, ns, "software", ("autoscaling/v2", "HorizontalPodAutoscaler"))
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
    (ds,) = owned(kube, ns, "software", ("apps/v1", "DaemonSet"))
    assert ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"]
    conf = next(c for c in owned(kube, ns, "software", ("v1", "ConfigMap"))
                if c["metadata"]["name"] == "software-squid")["data"]["squid.conf"]
    assert "acl nightshift_clients src 10.0.0.0/16 100.64.0.0/16" in conf
    # A hand edit of the squids is drift: restored.
    kubectl("-n", ns, "set", "image", "deployment/software-squid", "squid=squid:hand-edited")
    wait_for("the squid image restored", lambda: owned(kube, ns, "software", (
        "apps/v1", "Deployment"))[0]["spec"]["template"]["spec"]["containers"][0][
        "image"] == "nightshift-squid", 30)
    # min == max: the HPA goes and the Deployment gets the count.
    kubectl("-n", ns, "patch", "sharedstorage", "software", "--type=merge", "-p",
            json.dumps({"spec": {"cvmfs": {"squid": {"replicas": {"min": 2, "max": 2}}}}}))
    wait_for("the HPA pruned", lambda: not owned(
        kube, ns, "software", ("autoscaling/v2", "HorizontalPodAutoscaler")), 30)
    assert owned(kube, ns, "software", ("apps/v1", "Deployment"))[0]["spec"]["replicas"] == 2
    kubectl("-n", ns, "delete", "sharedstorage", "software", "--wait=false")
    wait_for("the storage deleted", lambda: gone(kube, ns, "software"), 30)


def _a_client_change_is_outdated_until_its_pod_goes(kube: Kube, kubectl: Kubectl,
                                                    ns: str) -> None:
    """A third repository changes the clients' template; the real DaemonSet controller
    (updateStrategy OnDelete) leaves the node's client as it is, and the storage says so
    until that pod is deleted and made again from the new template."""
    kubectl("-n", ns, "patch", "sharedstorage", "software", "--type=json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/cvmfs/repositories/-", "value": "cms.cern.ch"}]))

    def clients() -> dict[str, Any]:
        return dict((get(kube, ns, "software").get("status") or {}).get("clients") or {})

    def explain() -> str:
        (ds,) = owned(kube, ns, "software", ("apps/v1", "DaemonSet"))
        return json.dumps({"metadata.generation": ds["metadata"].get("generation"),
                           "status": ds.get("status"), "storage": clients()})

    said = wait_for("the client counted outdated", lambda: clients().get("update"), 60,
                    explain=explain)
    assert clients()["outdated"] == 1 and said.startswith(
        "1 of 1 nodes mount the previous configuration"), said
    # The command it gives selects the client's pod (one node here: no node to name).
    labels = said.split(f"kubectl delete pod -n {ns} -l ", 1)[1].split(" ", 1)[0]
    out = kubectl("-n", ns, "delete", "pod", "-l", labels, "--grace-period=0", "--force")
    assert "deleted" in out.stdout, out
    wait_for("the new client counted", lambda: "outdated" not in clients(), 60)


def _a_stage_off_its_client_pools_waits(kube: Kube, kubectl: Kubectl, ns: str) -> None:
    """A run whose stage runs on a pool the storage's clients do not cover: no mounter
    there, so the stage waits and names both fields, where its pods would have found no
    /cvmfs while the storage said Ready."""
    kubectl.apply(pipelinerun("offpool", ns, [stage("sim", "elsewhere", 1,
                                                    mounts=[{"storage": "sw"}])],
                              storage=[{"name": "sw", "sharedStorage": "software"}]))

    def held() -> str | None:
        run = kube.get(names.API_VERSION, names.PIPELINERUN, "offpool", ns) or {}
        prog: dict[str, Any] = next((c for c in (run.get("status") or {}).get(
            "conditions") or [] if c["type"] == "Progressing"), {})
        return str(prog["message"]) if prog.get("reason") == "WaitingForStorage" else None

    said = wait_for("the stage held", held, 60)
    assert said.startswith("spec.stages[0].pool: pool 'elsewhere' is not in SharedStorage "
                           "'software' spec.cvmfs.client.pools (p-"), said
    assert not jobs(kube, ns, "offpool")
    kubectl("-n", ns, "delete", "nsrun", "offpool")


def _load_balancer_said(kube: Kube, kubectl: Kubectl, ns: str, svc: dict[str, Any]) -> None:
    """No controller gives this cluster's LoadBalancer Services an address: past its
    grace the storage says so, then quotes the event a controller writes (made here as
    the in-tree service controller words it), and forgets it once the Service has one."""
    woke = [float("-inf")]

    def now() -> str:
        # Services are not watched: an annotation wakes a pass. Not at every poll: each
        # one moves the resourceVersion, so a pass slower than the polls (a loaded CI
        # machine) would lose every status write to 409 and never show the change.
        if time.monotonic() - woke[0] >= 5:
            kubectl("-n", ns, "annotate", "--overwrite", "sharedstorage", "software",
                    f"test.nightshift.io/wake={uuid.uuid4().hex[:6]}")
            woke[0] = time.monotonic()
        return str((get(kube, ns, "software").get("status") or {}).get("squid", {}).get(
            "loadBalancer", ""))

    def said(part: str) -> str | None:
        return lb if part in (lb := now()) else None

    lb = wait_for("status.squid.loadBalancer", lambda: said("no controller has said"), 60)
    # The bed has the EC2NodeClass CRD or not (docs/local-cluster.md): the operator's
    # platform, which the Service's annotations show, picks the controller named.
    aws = "service.beta.kubernetes.io/aws-load-balancer-type" in (
        svc["metadata"].get("annotations") or {})
    assert lb.startswith(f"LoadBalancer Service software-squid has no address after "
                         f"{LB_GRACE} s and no controller has said why: " + (
                             "on EKS the AWS Load Balancer Controller" if aws else
                             "this cluster gives LoadBalancer Services no address")), lb
    assert get(kube, ns, "software")["status"]["phase"] == "Ready"
    kubectl.apply({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": f"software-squid.{uuid.uuid4().hex[:8]}"},
                   "involvedObject": {"apiVersion": "v1", "kind": "Service",
                                      "name": "software-squid", "namespace": ns,
                                      "uid": svc["metadata"]["uid"]},
                   "reason": "SyncLoadBalancerFailed", "type": "Warning",
                   "message": "Error syncing load balancer: failed to ensure load balancer: "
                              "no subnets found", "source": {"component": "service-controller"},
                   "firstTimestamp": svc["metadata"]["creationTimestamp"],
                   "lastTimestamp": svc["metadata"]["creationTimestamp"], "count": 1}, ns)
    lb = wait_for("the controller's words", lambda: said("SyncLoadBalancerFailed"), 60)
    assert ("software-squid has no address after 3 s: SyncLoadBalancerFailed: Error syncing "
            "load balancer: failed to ensure load balancer: no subnets found; kubectl "
            f"describe service -n {ns} software-squid") in lb, lb
    kubectl("-n", ns, "patch", "service", "software-squid", "--subresource=status",
            "--type=merge", "-p", json.dumps(
                {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}))
    wait_for("the field gone", lambda: now() == "", 60)
    assert "http://192.0.2.10:3128" in str(get(kube, ns, "software")["status"]["endpoints"])


def test_not_ready_names_the_pods_no_node_takes(kube: Kube, kubectl: Kubectl,
                                                storage_operator: OperatorProcess, ns: str,
                                                kwok_pool: str) -> None:
    # The squids' pool has no node: the real scheduler's words reach the storage.
    kubectl.apply(storage(ns, "nowhere", {
        "type": "cvmfs",
        "cvmfs": {"repositories": ["demo.nightshift.io"], "client": {"pools": [kwok_pool]},
                  "squid": {"pool": "no-such-pool",
                            "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"]}}}))
    ready = wait_for("the squid pod named in Ready's message", lambda: (
        c := condition(get(kube, ns, "nowhere"), "Ready")).get("status") == "False"
        and "is not scheduled" in c.get("message", "") and c, 90,
        explain=lambda: str(get(kube, ns, "nowhere").get("status")))
    assert ready["reason"] == "NotReady"
    assert "pod nowhere-squid-" in ready["message"], ready
    assert "0/" in ready["message"] and "spec.cvmfs.squid.pool" in ready["message"], ready
    kubectl("-n", ns, "delete", "sharedstorage", "nowhere", "--wait=false")
    wait_for("the storage deleted", lambda: gone(kube, ns, "nowhere"), 60)
    # A disk cache no node holds (the KWOK pool's nodes have 500Gi): the squid requests
    # it as ephemeral storage, and the scheduler's words and both fixes reach Ready.
    kubectl.apply(storage(ns, "huge", {
        "type": "cvmfs",
        "cvmfs": {"repositories": ["demo.nightshift.io"], "client": {"pools": [kwok_pool]},
                  "squid": {"pool": kwok_pool, "diskCache": "600Gi",
                            "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"]}}}))
    ready = wait_for("the squid's disk named in Ready's message", lambda: (
        c := condition(get(kube, ns, "huge"), "Ready")).get("status") == "False"
        and "Insufficient ephemeral-storage" in c.get("message", "") and c, 90,
        explain=lambda: str(get(kube, ns, "huge").get("status")))
    assert "lower spec.cvmfs.squid.diskCache" in ready["message"], ready


def test_gluster_servers_clients_and_volume_job(kube: Kube, kubectl: Kubectl,
                                                storage_operator: OperatorProcess, ns: str,
                                                kwok_pool: str) -> None:
    kubectl.apply(storage(ns, "montage", {
        "type": "glusterfs",
        "glusterfs": {"layout": "nufa", "pool": kwok_pool, "servers": 1,
                      "clients": {"pools": [kwok_pool]}}}))
    job = wait_for("the volume Job", lambda: owned(kube, ns, "montage", ("batch/v1", "Job")),
                   READY_TIMEOUT)[0]
    assert job["spec"]["template"]["spec"]["nodeName"] == f"kwok-{kwok_pool}"
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "volume create montage" in script and "cluster.nufa on" in script
    (sts,) = owned(kube, ns, "montage", ("apps/v1", "StatefulSet"))
    assert sts["spec"]["template"]["spec"]["hostNetwork"]
    # KWOK never runs the Job's pod to completion: the volume is not there yet.
    wait_for("Ready=False: making the volume", lambda: "making the volume (Job montage-"
             "gluster-volume)" in condition(get(kube, ns, "montage"), "Ready")["message"], 30)
    obj = get(kube, ns, "montage")
    assert obj["status"]["endpoint"] == f"glusterfs://montage-gluster.{ns}.svc.cluster.local/montage"
