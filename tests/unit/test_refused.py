"""A write the API server refuses becomes a condition on the run at once (issue 14).

Before, the pass raised, the engine retried the same write forever with a warning in
the operator's log, and the run showed no phase and no condition. Now a 4xx on the
run's Job or ConfigMap (not a conflict, throttling, a full quota or a namespace being
deleted) fails the run in that pass (once any Jobs it runs end: see
test_invalid_once_started.py), naming the object and the API server's message, and
later passes do not write it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nightshift.api import conditions as cond
from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.kube import KubeError, Obj
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.sharedstorage import reconcile as sharedstorage
from nightshift.sharedstorage.observe import Sources as StorageSources
from nightshift.sharedstorage.observe import SquidSampler
from nightshift.virtualcluster import reconcile as virtualcluster
from nightshift.virtualcluster.observe import CrdCache, Sources
from nightshift.virtualcluster.provider import CRD_KWOKNODECLASS, CRD_NODEPOOL
from tests.unit import vcfixtures
from tests.unit.test_chart_kubecalls import NoAws, RecordingKube, _crd

NS = "physics"
INVALID = ('The Job "nightly-a-1c2d3e" is invalid: spec.template.spec.containers[0].env[6]'
           '.valueFrom.resourceFieldRef.containerName: Invalid value: "nope": must be the '
           "name of a container in the pod")


class RefusingKube(RecordingKube):
    """Refuses every server-side apply of one kind with the given error."""

    def __init__(self, objects: Sequence[Obj], kind: str, error: KubeError) -> None:
        super().__init__(objects)
        self.kind, self.error = kind, error
        self.attempts = 0

    def _call(self, method: str, path: str, body: Any = None,
              query: Sequence[tuple[str, Any]] = (), content_type: str | None = None,
              accept: str = "application/json") -> Obj:
        if (method == "PATCH" and content_type == "application/apply-patch+yaml"
                and body.get("kind") == self.kind):
            self.attempts += 1
            raise self.error
        return super()._call(method, path, body, query, content_type, accept)


def _run() -> Obj:
    return {
        "apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
        "metadata": {"name": "nightly", "namespace": NS, "uid": "run-uid", "generation": 1},
        "spec": {"stages": [{"name": "a", "image": "busybox:1.36",
                             "forEach": {"items": ["x", "y"]},
                             "steps": [{"name": "main", "command": ["true"]}]}]},
    }


def _status(kube: RecordingKube) -> dict[str, Any]:
    run = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, NS, "nightly")]
    return dict(run.get("status") or {})


def _pass(kube: RecordingKube) -> None:
    pipelinerun.reconcile(kube, OperatorConfig(runner_image="runner:dev"), NS, "nightly",
                          pipelinerun.LoopState())


def test_a_refused_job_fails_the_run_at_once_naming_the_job() -> None:
    kube = RefusingKube([_run()], "Job", KubeError(422, "Invalid", INVALID))
    _pass(kube)  # does not raise: nothing for the engine to retry
    status = _status(kube)
    assert status["phase"] == "Failed"
    invalid = cond.find(status["conditions"], cond.INVALID)
    assert invalid is not None and invalid["status"] == "True"
    assert invalid["message"].startswith("Job nightly-a-")
    assert "refused by the API server: 422 Invalid: " + INVALID in invalid["message"]
    failed = cond.find(status["conditions"], cond.FAILED)
    assert failed is not None and failed["status"] == "True"
    assert kube.attempts == 1
    # Finished is final: later passes do not try the write again.
    _pass(kube)
    _pass(kube)
    assert kube.attempts == 1 and _status(kube)["phase"] == "Failed"


def test_a_refused_configmap_names_the_configmap() -> None:
    kube = RefusingKube([_run()], "ConfigMap",
                        KubeError(400, "BadRequest", "admission webhook denied the request"))
    _pass(kube)
    invalid = cond.find(_status(kube)["conditions"], cond.INVALID)
    assert invalid is not None and invalid["message"].startswith("ConfigMap nightly-a-items")
    assert "400 BadRequest: admission webhook denied the request" in invalid["message"]
    assert not [o for o in kube.store.values() if o["kind"] == "Job"]


@pytest.mark.parametrize("error", [
    KubeError(0, "Unreachable", "the Kubernetes API could not be reached (PATCH ...): "
              "ProtocolError: Connection aborted."),
    KubeError(409, "Conflict", "the object has been modified"),
    KubeError(429, "TooManyRequests", "slow down"),
    KubeError(401, "Unauthorized", "Unauthorized"),
    KubeError(408, "Timeout", "request timed out"),
    KubeError(500, "InternalError", "etcd timeout"),
    KubeError(403, "Forbidden", 'jobs.batch "x" is forbidden: exceeded quota: q, '
              "requested: count/jobs.batch=1, used: count/jobs.batch=0, limited: "
              "count/jobs.batch=0"),
    KubeError(403, "Forbidden", "unable to create new content in namespace physics "
              "because it is being terminated"),
])
def test_transient_errors_are_left_to_the_engine(error: KubeError) -> None:
    kube = RefusingKube([_run()], "Job", error)
    with pytest.raises(KubeError):
        _pass(kube)
    assert _status(kube).get("phase") != "Failed"


def test_a_forbidden_write_is_a_refusal() -> None:
    """An admission policy or missing RBAC: the same write will be refused again."""
    kube = RefusingKube([_run()], "Job", KubeError(
        403, "Forbidden", 'jobs.batch "x" is forbidden: ValidatingAdmissionPolicy '
        "'no-busybox' denied request"))
    _pass(kube)
    assert _status(kube)["phase"] == "Failed"


def test_a_nodepool_karpenter_refuses_names_the_pool_fields_it_passes_on() -> None:
    """A VirtualCluster admitted by an older CRD whose labels Karpenter's NodePool schema
    refuses: NotReady points at the fields it came from, not only at a bug report."""
    vc = vcfixtures.vc(vcfixtures.POOLS["spot-compute"], provider="kwok")
    kube = RefusingKube([vc, _crd(CRD_NODEPOOL), _crd(CRD_KWOKNODECLASS)], "NodePool",
                        KubeError(422, "Invalid", 'NodePool.karpenter.sh "x" is invalid: '
                                  'spec.template.metadata.labels: Invalid value: "object": '
                                  'label "kubernetes.io/hostname" is restricted'))
    ctx = virtualcluster.Context(kube, Sources(CrdCache(), vcfixtures.catalog(), NoAws()))
    name, ns = vc["metadata"]["name"], vc["metadata"]["namespace"]
    virtualcluster.reconcile(ctx, ns, name, virtualcluster.LoopState())
    got = kube.store[kube.path(names.API_VERSION, names.VIRTUALCLUSTER, ns, name)]
    ready = cond.find((got.get("status") or {}).get("conditions"), cond.READY)
    assert ready is not None and ready["status"] == cond.FALSE, got.get("status")
    assert 'label "kubernetes.io/hostname" is restricted' in ready["message"], ready
    assert "spec.pools[].labels, taints" in ready["message"], ready


def test_a_storage_object_a_full_quota_refuses_says_to_raise_it() -> None:
    """A LoadBalancer Service past the namespace's quota is the namespace's to raise,
    not 'a nightshift bug'."""
    ns, name = NS, "software"
    storage = {"apiVersion": names.API_VERSION, "kind": names.SHAREDSTORAGE,
               "metadata": {"name": name, "namespace": ns, "uid": "ss-uid", "generation": 1},
               "spec": {"type": "cvmfs", "cvmfs": {
                   "repositories": ["demo.nightshift.io"], "client": {"pools": ["p"]},
                   "squid": {"pool": "p", "upstreams": ["http://s1.example.org/cvmfs/@fqrn@"],
                             "service": {"type": "LoadBalancer"}}}}}
    kube = RefusingKube([storage], "Service", KubeError(
        403, "Forbidden", f'services "{name}-squid" is forbidden: exceeded quota: physics, '
        "requested: services.loadbalancers=1, used: services.loadbalancers=0, limited: "
        "services.loadbalancers=0"))
    ctx = sharedstorage.Context(kube, StorageSources(
        sampler=SquidSampler(fetch=lambda url, t: ""), cluster_cidrs=("10.0.0.0/16",)))
    sharedstorage.reconcile(ctx, ns, name, sharedstorage.LoopState())
    got = kube.store[kube.path(names.API_VERSION, names.SHAREDSTORAGE, ns, name)]
    ready = cond.find((got.get("status") or {}).get("conditions"), cond.READY)
    assert ready is not None and ready["status"] == cond.FALSE, got.get("status")
    assert "exceeded quota: physics" in ready["message"], ready
    assert "the namespace's ResourceQuota is full for it: raise the quota" in ready["message"]
    assert "nightshift bug" not in ready["message"], ready


def test_a_refused_prune_names_what_to_check_and_the_way_around() -> None:
    class NoDelete(RecordingKube):
        def _call(self, method: str, path: str, body: Any = None,
                  query: Sequence[tuple[str, Any]] = (), content_type: str | None = None,
                  accept: str = "application/json") -> Obj:
            if method == "DELETE":
                raise KubeError(403, "Forbidden", 'horizontalpodautoscalers.autoscaling '
                                '"software-squid" is forbidden: User "system:serviceaccount:'
                                'nightshift:nightshift" cannot delete resource')
            return super()._call(method, path, body, query, content_type, accept)

    from nightshift.sharedstorage.plantypes import Plan
    errors = sharedstorage._apply(NoDelete(), Plan(prune=[{
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "name": "software-squid", "namespace": NS}]))
    assert errors == [
        "deleting HorizontalPodAutoscaler/software-squid, which the storage no longer "
        "needs, was refused by the API server (horizontalpodautoscalers.autoscaling "
        '"software-squid" is forbidden: User "system:serviceaccount:nightshift:nightshift" '
        "cannot delete resource); the operator's role must allow delete on it (the chart's "
        "does) and no admission webhook may guard it, or delete it by hand"]


@pytest.mark.parametrize("error", [
    KubeError(0, "Unreachable", "the Kubernetes API could not be reached (PATCH ...): "
              "ProtocolError: Connection aborted."),
    KubeError(401, "Unauthorized", "Unauthorized"),
    KubeError(408, "Timeout", "request timed out"),
])
def test_virtualcluster_and_storage_leave_transient_errors_to_the_engine(
        error: KubeError) -> None:
    """Not "refused by the API server ... a nightshift bug" in Ready: the same write may
    go through on the engine's retry (and its ReconcileError says why if it lasts)."""
    vc = vcfixtures.vc(vcfixtures.POOLS["spot-compute"], provider="kwok")
    kube = RefusingKube([vc, _crd(CRD_NODEPOOL), _crd(CRD_KWOKNODECLASS)], "NodePool", error)
    ctx = virtualcluster.Context(kube, Sources(CrdCache(), vcfixtures.catalog(), NoAws()))
    with pytest.raises(KubeError):
        virtualcluster.reconcile(ctx, vc["metadata"]["namespace"], vc["metadata"]["name"],
                                 virtualcluster.LoopState())
    from nightshift.sharedstorage.plantypes import Plan
    with pytest.raises(KubeError):
        sharedstorage._apply(RefusingKube([], "Service", error), Plan(apply=[{
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "software-squid", "namespace": NS}}]))


def test_a_run_recreated_under_its_name_never_takes_the_earlier_runs_objects() -> None:
    """`kubectl delete nsrun nightly && kubectl apply -f nightly.yaml` before the garbage
    collector went, or a delete with --cascade=orphan: the earlier run's Job and items
    ConfigMaps hold the new run's names. They are never its own (a finished Job would
    mark its stage Succeeded with nothing run): the stage waits, saying which and how."""
    kube = RecordingKube([{**_run(), "metadata": {**_run()["metadata"], "uid": "old-uid"}}])
    _pass(kube)
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    done = kube.store[jpath]
    done["status"] = {"succeeded": 2, "completedIndexes": "0-1", "conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-30T00:00:00Z"}]}
    kube.put(done)
    kube.put(_run())  # the new run: uid run-uid
    _pass(kube)
    st = _status(kube)
    assert st.get("phase") != "Succeeded", st
    assert kube.store[jpath]["metadata"]["ownerReferences"][0]["uid"] == "old-uid"
    prog = cond.find(st["conditions"], cond.PROGRESSING)
    assert prog is not None and prog["reason"] == "EarlierRunObjects", st
    said = prog["message"]
    assert f"job/{done['metadata']['name']}" in said and "configmap/" in said, said
    assert said.index("kubectl delete configmap/") < said.index(f" -n {NS})"), said
    # Collected (or deleted by hand): the new run starts with its own objects.
    for path in [p for p in kube.store if "/jobs/" in p or "/configmaps/" in p]:
        del kube.store[path]
    _pass(kube)
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    assert kube.store[jpath]["metadata"]["ownerReferences"][0]["uid"] == "run-uid"
    prog = cond.find(_status(kube)["conditions"], cond.PROGRESSING)
    assert prog is not None and prog["reason"] != "EarlierRunObjects", prog


def test_an_earlier_runs_objects_hold_only_their_own_stage() -> None:
    """The earlier run had stage b only, and only its second item chunk is left (its
    Job and first chunk already collected): b waits, naming it; a starts meanwhile."""
    two = {**_run(), "spec": {"stages": [
        {"name": n, "image": "busybox:1.36", "forEach": {"items": ["x", "y"]},
         "steps": [{"name": "main", "command": ["true"]}]} for n in ("a", "b")]}}
    from nightshift.pipelinerun import items as itemsmod
    left = itemsmod.items_configmap_name("nightly", "b", 1)
    kube = RecordingKube([two, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": left, "namespace": NS, "labels": {"nightshift.io/pipeline-run": "nightly",
                                                   "nightshift.io/stage": "b"}}}])
    _pass(kube)
    jobs = [o for o in kube.store.values() if o["kind"] == "Job"]
    assert [j["metadata"]["labels"]["nightshift.io/stage"] for j in jobs] == ["a"]
    prog = cond.find(_status(kube)["conditions"], cond.PROGRESSING)
    assert prog is not None and prog["reason"] == "EarlierRunObjects", prog
    assert prog["message"].startswith(f"stage b: configmap/{left} belong to an earlier")
