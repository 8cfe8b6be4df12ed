"""kubecalls.CALLS is what the code really calls: reconcile passes run against an
in-memory API server that records every request kube.py makes, as RBAC sees it
(apiGroup, resource, verb, scope). The table's kube.py rows must be exactly the
recorded set: a call the table lacks would be refused in the cluster (the chart grants
the table); a row nothing calls is privilege to drop.

The passes cover a PipelineRun (items from a ConfigMap, Jobs created and patched,
failed pods sampled, a failed pass reported), VirtualClusters on both providers
(created, a pool removed, deleted), a run's references, SharedStorages of each type with workloads
(created, objects an older version made under other names pruned, deleted); the
Secret row through the fromS3 credentials path.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

from nightshift import kubecalls
from nightshift.api import names
from nightshift.aws.clients import Ec2Access, unknown_price
from nightshift.config import OperatorConfig
from nightshift.engine.status import reconcile_error_reporter
from nightshift.kube import Kube, KubeError, Obj
from nightshift.pipelinerun import itemsource, stalled
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift.sharedstorage import reconcile as sharedstorage
from nightshift.sharedstorage.observe import Sources as StorageSources
from nightshift.sharedstorage.observe import SquidSampler
from nightshift.sharedstorage.plantypes import NAMESPACED_KINDS
from nightshift.virtualcluster import reconcile as virtualcluster
from nightshift.virtualcluster.observe import CrdCache, Sources
from nightshift.virtualcluster.provider import CRD_EC2NODECLASS, CRD_KWOKNODECLASS, CRD_NODEPOOL
from tests.bad_sharedstorages import GOOD
from tests.unit import vcfixtures

Key = tuple[str, str, str, str]
PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                  r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)"
                  r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$")


def _fields_selected(obj: Obj, selector: str) -> bool:
    """`=` and `!=` terms on dotted fields, as the API server reads a field selector: a
    field the object lacks is the empty string."""
    for term in filter(None, selector.split(",")):
        negated = "!=" in term
        key, want = term.split("!=" if negated else "=", 1)
        got: Any = obj
        for part in key.split("."):
            got = got.get(part) if isinstance(got, dict) else None
        if (("" if got is None else str(got)) == want) == negated:
            return False
    return True


def _selected(labels: dict[str, str], selector: str) -> bool:
    """Equality, inequality, existence and `in` terms, as the API server reads them."""
    for raw in re.findall(r"[^,(]+(?:\([^)]*\))?", selector):
        term = raw.strip()
        if m := re.fullmatch(r"(\S+)\s+in\s+\(([^)]*)\)", term):
            if labels.get(m[1]) not in {v.strip() for v in m[2].split(",")}:
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v:
                return False
        elif term not in labels:
            return False
    return True


def _in_collection(obj_path: str, coll: re.Match[str]) -> bool:
    """Whether the object at obj_path is listed by the collection request `coll` (all
    namespaces when the request names none)."""
    o = PATH.match(obj_path)
    assert o is not None
    same = all(o[k] == coll[k] for k in ("core", "group", "version", "plural"))
    return same and (coll["ns"] is None or o["ns"] == coll["ns"])


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif v is None:
            into.pop(k, None)
        else:
            into[k] = copy.deepcopy(v)


class RecordingKube(Kube):
    """Kube with an in-memory API server behind _call; records every request."""

    def __init__(self, objects: Sequence[Obj] = ()) -> None:
        super().__init__(api_client=None)
        self.store: dict[str, Obj] = {}
        self.calls: set[Key] = set()
        self._version = itertools.count(1)
        for obj in objects:
            self.put(obj)

    def put(self, obj: Obj) -> None:
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self._version))
        stored["metadata"].setdefault("uid", f"uid-{path}")  # as the API server gives one
        self.store[path] = stored

    def _call(self, method: str, path: str, body: Any = None,
              query: Sequence[tuple[str, Any]] = (), content_type: str | None = None,
              accept: str = "application/json") -> Obj:
        m = PATH.match(path)
        assert m, f"unexpected path {path}"
        group = "" if m["core"] else m["group"]
        resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
        scope = kubecalls.NAMESPACE if m["ns"] else kubecalls.CLUSTER
        params = dict(query)
        if method == "GET" and not m["name"]:
            self.calls.add((group, resource, "list", scope))
            selector = str(params.get("labelSelector") or "")
            fields = str(params.get("fieldSelector") or "")
            items = [copy.deepcopy(o) for p, o in self.store.items()
                     if _in_collection(p, m) and _selected(
                         o["metadata"].get("labels") or {}, selector)
                     and _fields_selected(o, fields)]
            return {"items": items}
        target = path.removesuffix(f"/{m['sub']}") if m["sub"] else path
        if method == "GET":
            self.calls.add((group, resource, "get", scope))
            if target not in self.store:
                raise KubeError(404, "NotFound", f"{path} not found")
            return copy.deepcopy(self.store[target])
        if method == "POST":
            self.calls.add((group, resource, "create", scope))
            return dict(body)
        if method == "DELETE":
            self.calls.add((group, resource, "delete", scope))
            if self.store.pop(target, None) is None:
                raise KubeError(404, "NotFound", f"{path} not found")
            return {}
        assert method == "PATCH", method
        self.calls.add((group, resource, "patch", scope))
        if content_type == "application/apply-patch+yaml":
            if target not in self.store:
                # The API server authorizes an apply that creates as create, too.
                self.calls.add((group, resource, "create", scope))
                self.put(dict(body))
            else:
                _merge(self.store[target], copy.deepcopy(dict(body)))
        else:
            if target not in self.store:
                raise KubeError(404, "NotFound", f"{path} not found")
            patch = copy.deepcopy(dict(body))
            (patch.get("metadata") or {}).pop("resourceVersion", None)
            _merge(self.store[target], patch)
        self.store[target]["metadata"]["resourceVersion"] = str(next(self._version))
        return copy.deepcopy(self.store[target])

    def _raw(self, method: str, path: str, query: Sequence[tuple[str, Any]] = (),
             accept: str = "*/*") -> bytes:
        raise AssertionError(f"the operator does not read raw bodies ({method} {path})")


NS = "physics"


def _run() -> Obj:
    return {
        "apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
        "metadata": {"name": "nightly", "namespace": NS, "uid": "run-uid", "generation": 1},
        "spec": {"stages": [
            {"name": "calib", "image": "busybox:1.36",
             "forEach": {"fromConfigMap": {"name": "nights", "key": "items"}},
             "steps": [{"name": "main", "command": ["true"]}]},
        ]},
    }


def pipelinerun_calls() -> set[Key]:
    nights = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "nights", "namespace": NS},
              "data": {"items": "n1\nn2\nn3\n"}}
    kube = RecordingKube([_run(), nights])
    config = OperatorConfig(runner_image="runner:dev")
    state = pipelinerun.LoopState()
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    jobs = [o for o in kube.store.values() if o["kind"] == "Job"]
    assert jobs, "the first pass creates the stage's Job"
    job = jobs[0]
    # Two items failed: the next pass samples failed pods.
    job["status"] = {"failed": 2, "active": 1}
    kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "nightly-calib-0-x", "namespace": NS,
        "labels": job["spec"]["template"]["metadata"]["labels"]},
        "status": {"phase": "Failed"}})
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    # No pod at all for the stall's length: the Job's FailedCreate events are read.
    job["status"] = {"failed": 2, "ready": 0, "startTime": "2025-03-01T12:00:00Z"}
    kube.put(job)
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    state.pods.stalls[job["metadata"]["name"]].since -= stalled.STALL_SECONDS
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    # Suspending the run patches the running Job.
    run_path = kube.path(names.API_VERSION, names.PIPELINERUN, NS, "nightly")
    kube.store[run_path]["spec"]["suspend"] = True
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    reconcile_error_reporter(kube, names.API_VERSION, names.PIPELINERUN)(
        NS, "nightly", "a pass failed")
    # A fromS3 stage's credentials Secret.
    kube.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": NS},
              "data": {"AWS_ACCESS_KEY_ID": "QUtJRA==", "AWS_SECRET_ACCESS_KEY": "c2VjcmV0"}})
    spec = PipelineRunSpec.model_validate({
        "stages": _run()["spec"]["stages"],
        "storage": [{"name": "raw", "s3": {"bucket": "raw", "credentialsSecret": "s3"}}]})
    itemsource.s3_target(kube, NS, spec.storage[0], "spec.storage[0]")
    # A run naming a VirtualCluster and a stage's ServiceAccount: both read.
    refs = _run()
    refs["metadata"]["name"] = "refs"
    refs["spec"]["virtualCluster"] = "chiles"
    refs["spec"]["stages"][0]["serviceAccountName"] = "pipeline"
    # ... a pvc storage's claim, and a Secret and a ConfigMap its env names: read too.
    refs["spec"]["storage"] = [{"name": "data", "pvc": {"claimName": "data"}}]
    refs["spec"]["stages"][0]["inputs"] = [{"storage": "data", "path": "in/{item}"}]
    refs["spec"]["stages"][0]["env"] = [
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "token", "key": "t"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cal", "key": "c"}}}]
    kube.put(refs)
    pipelinerun.reconcile(kube, config, NS, "refs", pipelinerun.LoopState())
    # An mpi stage: its MPIJob listed and created, then suspended by a merge patch.
    mpi = _run()
    mpi["metadata"]["name"] = "npb"
    mpi["spec"]["stages"] = [{"name": "ep", "image": "mpi:dev", "mpi": {"workers": 2},
                              "steps": [{"name": "ep", "command": ["ep", "S"]}]}]
    kube.put(mpi)
    mpi_state = pipelinerun.LoopState()
    pipelinerun.reconcile(kube, config, NS, "npb", mpi_state)
    assert any(o["kind"] == "MPIJob" for o in kube.store.values())
    kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, NS, "npb")]["spec"]["suspend"] = True
    pipelinerun.reconcile(kube, config, NS, "npb", mpi_state)
    return kube.calls


class NoAws(Ec2Access):
    """No AWS call from a unit test (boto3 would look for a region on the network)."""

    def prices(self) -> Any:
        return unknown_price

    def catalog(self, names: Any = ()) -> None:
        return None


def _crd(name: str) -> Obj:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name}}


def virtualcluster_calls(provider: str) -> set[Key]:
    nodeclass = CRD_KWOKNODECLASS if provider == "kwok" else CRD_EC2NODECLASS
    pools = [vcfixtures.POOLS["spot-compute"],
             {"name": "spare", "class": "general", "maxCPU": 16}]
    vc = vcfixtures.vc(*pools, provider=provider)
    kube = RecordingKube([vc, _crd(CRD_NODEPOOL), _crd(nodeclass), _run()])
    catalog = vcfixtures.catalog() if provider == "kwok" else None
    ctx = virtualcluster.Context(kube, Sources(CrdCache(), catalog, NoAws()))
    state = virtualcluster.LoopState()
    name, ns = vc["metadata"]["name"], vc["metadata"]["namespace"]
    vc_path = kube.path(names.API_VERSION, names.VIRTUALCLUSTER, ns, name)

    virtualcluster.reconcile(ctx, ns, name, state)
    made = {o["kind"] for o in kube.store.values()}
    assert {"NodePool", "KWOKNodeClass" if provider == "kwok" else "EC2NodeClass"} <= made
    # A pool removed: its NodePool is pruned.
    kube.store[vc_path]["spec"]["pools"] = pools[:1]
    virtualcluster.reconcile(ctx, ns, name, state)
    # Deleted: everything it made goes, then its finalizer.
    kube.store[vc_path]["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    kube.store[vc_path]["metadata"]["annotations"] = {f"{names.GROUP}/force-delete": "true"}
    for _ in range(4):
        if virtualcluster.reconcile(ctx, ns, name, state).gone:
            break
    assert not [o for o in kube.store.values() if o["kind"] == "NodePool"]
    reconcile_error_reporter(kube, names.API_VERSION, names.VIRTUALCLUSTER)(
        ns, name, "a pass failed")
    return kube.calls


def _no_squid(url: str, timeout: float) -> str:
    raise OSError("no network in unit tests")


def _stale(kind: tuple[str, str], storage: Obj) -> Obj:
    """An object an older operator made for `storage` under a name no longer rendered."""
    meta = storage["metadata"]
    return {"apiVersion": kind[0], "kind": kind[1], "metadata": {
        "name": f"{meta['name']}-retired", "namespace": meta["namespace"],
        "labels": {names.LABEL_STORAGE: meta["name"]},
        "ownerReferences": [{"apiVersion": names.API_VERSION, "kind": names.SHAREDSTORAGE,
                             "name": meta["name"], "uid": meta["uid"]}]}}


def sharedstorage_calls(case: str) -> set[Key]:
    storage = copy.deepcopy(GOOD[case])
    ns, name = storage["metadata"]["namespace"], storage["metadata"]["name"]
    vc = vcfixtures.vc(*[{"name": p, "class": "general", "maxCPU": 16}
                         for p in ("workers", "imaging", "nfs", "storage")])
    vc["metadata"].update(name="snfactory", namespace=ns)
    vc["status"] = {"mode": "karpenter"}  # reconciled: the storage places its workloads
    gp3 = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
           "metadata": {"name": "gp3"}}
    retired = [_stale(k, storage) for k in NAMESPACED_KINDS[storage["spec"]["type"]]]
    run = _run()
    run["spec"]["storage"] = [{"name": "sw", "sharedStorage": name}]
    kube = RecordingKube([storage, vc, gp3, run, *retired])
    ctx = sharedstorage.Context(kube, StorageSources(
        sampler=SquidSampler(fetch=_no_squid), cluster_cidrs=("10.0.0.0/16",)))
    state = sharedstorage.LoopState()
    path = kube.path(names.API_VERSION, names.SHAREDSTORAGE, ns, name)
    sharedstorage.reconcile(ctx, ns, name, state)
    for pod in range(4):  # gluster servers ready: the volume Job
        kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{name}-gluster-{pod}", "namespace": ns, "labels": {
                names.LABEL_STORAGE: name, names.LABEL_COMPONENT: "gluster-server"}},
            "spec": {"nodeName": f"node-{pod}"},
            "status": {"podIP": f"10.0.9.{pod}", "conditions": [
                {"type": "Ready", "status": "True"}]}})
    svc = kube.path("v1", "Service", ns, f"{name}-nfs")
    if svc in kube.store:  # nfs: the client PV once the Service has its address
        kube.store[svc]["spec"]["clusterIP"] = "10.96.0.12"
    sharedstorage.reconcile(ctx, ns, name, state)
    assert not [o for o in kube.store.values() if o["metadata"]["name"].endswith("-retired")]
    made = {o["kind"] for o in kube.store.values()
            if (o["metadata"].get("labels") or {}).get(names.LABEL_STORAGE) == name}
    assert made >= {"nfs-dedicated": {"PersistentVolume", "PersistentVolumeClaim"},
                    "gluster-nufa": {"Job", "StatefulSet"},
                    "cvmfs-eks": {"HorizontalPodAutoscaler", "DaemonSet"}}.get(case, set())
    kube.store[path]["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    assert sharedstorage.reconcile(ctx, ns, name, state).requeue_after, "in use: kept"
    kube.store[path]["metadata"]["annotations"] = {f"{names.GROUP}/force-delete": "true"}
    assert sharedstorage.reconcile(ctx, ns, name, state).gone
    assert not [o for o in kube.store.values() if o["kind"] == "PersistentVolume"]
    reconcile_error_reporter(kube, names.API_VERSION, names.SHAREDSTORAGE)(
        ns, name, "a pass failed")
    return kube.calls


def reclaim_calls() -> set[Key]:
    """A deleted storage under reclaimPolicy Delete with data on a node: the node is
    read, the cleanup Job made."""
    storage = copy.deepcopy(GOOD["nfs-colocated-localdisk"])
    ns, name = storage["metadata"]["namespace"], storage["metadata"]["name"]
    storage["metadata"].update(finalizers=[names.FINALIZER_SHARED_STORAGE],
                               deletionTimestamp="2025-03-01T12:00:00Z")
    storage["status"] = {"dataNodes": ["node-0"]}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}}
    kube = RecordingKube([storage, node])
    ctx = sharedstorage.Context(kube, StorageSources(cluster_cidrs=("10.0.0.0/16",)))
    sharedstorage.reconcile(ctx, ns, name, sharedstorage.LoopState())
    assert kube.path("batch/v1", "Job", ns, f"{name}-reclaim-0") in kube.store
    return kube.calls


def test_the_kube_rows_are_exactly_what_the_code_calls() -> None:
    recorded = pipelinerun_calls() | reclaim_calls()
    for case in ("nfs-dedicated", "cvmfs-eks", "gluster-nufa", "s3"):
        recorded |= sharedstorage_calls(case)
    for provider in ("kwok", "aws"):
        recorded |= virtualcluster_calls(provider)
    table = {c.key for c in kubecalls.CALLS if kubecalls.KUBE in c.via}
    missing = recorded - table
    unused = table - recorded
    assert not missing, ("kube.py makes calls kubecalls.CALLS lacks (the chart would "
                         f"not grant them): {json.dumps(sorted(missing))}")
    assert not unused, ("kubecalls.CALLS has kube.py rows no pass made (drop them, or "
                        f"say they are kopf's): {json.dumps(sorted(unused))}")
