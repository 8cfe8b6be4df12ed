"""A run's VirtualCluster and pools checked (issue 12: never a silent Pending): a missing
VirtualCluster holds every stage, a missing pool its stage, each with the field and the
fix on the Progressing condition; a stage without pool gets the first pool."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.kube import KubeError, Obj
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun import references
from nightshift.pipelinerun.itemsource import ResolveError, resolve
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import Observed
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import stage
from tests.bad_sharedstorages import GOOD
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import advance, condition, items_for, jobs_of, make_run, observe


def spec(**kw: Any) -> PipelineRunSpec:
    stages = [{"name": "split", "image": "busybox", "pool": "general",
               "forEach": {"items": ["a"]}, "steps": [{"name": "s", "command": ["true"]}]},
              {"name": "invert", "image": "busybox", "dependsOn": ["split"],
               "forEach": {"items": ["a"]}, "steps": [{"name": "s", "command": ["true"]}]},
              {"name": "concat", "image": "busybox", "pool": "gpu", "dependsOn": ["invert"],
               "forEach": {"items": ["a"]}, "steps": [{"name": "s", "command": ["true"]}]}]
    return PipelineRunSpec.model_validate({"virtualCluster": "chiles", "stages": stages, **kw})


RECONCILED = {"mode": "karpenter"}  # what the VirtualCluster's first pass writes, and more
VC = {"spec": {"pools": [{"name": "compute"}, {"name": "general"}]}, "status": RECONCILED}


def test_a_missing_virtual_cluster_holds_every_stage_naming_the_field() -> None:
    r = references.check(spec(), "radio", {"chiles": None})
    assert r.waiting_stages == {"split", "invert", "concat"}
    (msg,) = r.waiting
    assert msg.startswith("spec.virtualCluster: no VirtualCluster 'chiles' in namespace radio")
    assert "kubectl get virtualclusters -n radio" in msg


def test_a_pool_not_in_the_virtual_cluster_holds_its_stage() -> None:
    r = references.check(spec(), "radio", {"chiles": VC})
    assert r.waiting_stages == {"concat"}
    (msg,) = r.waiting
    assert msg.startswith("spec.stages[2].pool: VirtualCluster 'chiles' has no pool 'gpu' "
                          "(its pools: compute, general)")


def test_a_stage_without_pool_runs_on_the_first_pool() -> None:
    r = references.check(spec(), "radio", {"chiles": VC})
    assert [st.pool for st in r.spec.stages] == ["general", "compute", "gpu"]


def test_nothing_checked_without_a_virtual_cluster_or_unread() -> None:
    plain = PipelineRunSpec.model_validate({"stages": spec().model_dump(by_alias=True)["stages"]})
    assert references.check(plain, "radio", {}).waiting == []
    assert references.check(spec(), "radio", {}).waiting == []


def test_a_missing_service_account_holds_its_stage() -> None:
    s = spec()
    stages = [st.model_copy(update={"service_account_name": "pipeline"}) if st.name == "invert"
              else st for st in s.stages]
    s = s.model_copy(update={"stages": stages})
    assert references.service_accounts(s) == ["pipeline"]
    r = references.check(s, "radio", {"chiles": VC}, {"pipeline": False})
    assert r.waiting_stages == {"invert", "concat"}
    assert r.reason == references.REASON  # the pool first: it is listed first
    assert any(m.startswith("spec.stages[1].serviceAccountName: no ServiceAccount 'pipeline'")
               and "kubectl create serviceaccount pipeline -n radio" in m for m in r.waiting)
    only = references.check(s.model_copy(update={"virtual_cluster": None}), "radio", {},
                            {"pipeline": False})
    assert only.waiting_stages == {"invert"} and only.reason == references.REASON_ACCOUNT
    assert references.check(s, "radio", {"chiles": VC}, {"pipeline": True}).waiting_stages \
        == {"concat"}


# --- The bad-reference table (issue 12): every object a run names, missing, gives a
# named Progressing reason whose message has the field, the object and the fix; the
# stage that needs it creates no Job, the others go on; created, the stage starts.

SECRET_ENV = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "archive-token",
                                                               "key": "token"}}}
CM_ENV = {"name": "CAL", "valueFrom": {"configMapKeyRef": {"name": "calibration",
                                                            "key": "epoch"}}}
S3 = [{"name": "raw", "s3": {"bucket": "raw", "credentialsSecret": "s3-keys"}}]
CREDS = frozenset(references.CREDENTIAL_KEYS)


def _stages(needing: dict[str, Any]) -> list[dict[str, Any]]:
    return [stage("free"), stage("needs", **needing)]


def _obs(run: dict[str, Any], **observed: Any) -> Observed:
    return replace(observe(run, items=items_for(run, "free", "needs", count=2)), **observed)


# id: (stage fields, spec fields, what the cluster holds as missing, as fixed, reason,
#      message parts)
TABLE: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], str,
                       list[str]]] = {
    "virtualCluster": (
        {}, {"virtualCluster": "chiles"},
        {"virtual_clusters": {"chiles": None}},
        {"virtual_clusters": {"chiles": VC}},
        "WaitingForVirtualCluster",
        ["spec.virtualCluster:", "VirtualCluster 'chiles'", "namespace physics",
         "kubectl get virtualclusters -n physics"]),
    "pool": (
        {"pool": "gpu"}, {"virtualCluster": "chiles"},
        {"virtual_clusters": {"chiles": VC}},
        {"virtual_clusters": {"chiles": {"status": RECONCILED, "spec": {"pools": [
            {"name": "compute"}, {"name": "gpu"}]}}}},
        "WaitingForVirtualCluster",
        ["spec.stages[1].pool:", "VirtualCluster 'chiles' has no pool 'gpu'",
         "its pools: compute, general"]),
    "serviceAccountName": (
        {"serviceAccountName": "pipeline"}, {},
        {"service_accounts": {"pipeline": False}}, {"service_accounts": {"pipeline": True}},
        "WaitingForServiceAccount",
        ["spec.stages[1].serviceAccountName:", "ServiceAccount 'pipeline'",
         "kubectl create serviceaccount pipeline -n physics"]),
    "sharedStorage": (
        {"inputs": [{"storage": "raw", "path": "n/{item}"}]},
        {"storage": [{"name": "raw", "sharedStorage": "raw-s3"}]},
        {"shared_storages": {"raw-s3": None}},
        {"shared_storages": {"raw-s3": GOOD["s3"]}},
        "WaitingForStorage",
        ["spec.storage[0].sharedStorage:", "SharedStorage 'raw-s3'", "namespace physics"]),
    "pvc claimName": (
        {"inputs": [{"storage": "data", "path": "in/{item}"}]},
        {"storage": [{"name": "data", "pvc": {"claimName": "night-data"}}]},
        {"volume_claims": {"night-data": False}}, {"volume_claims": {"night-data": True}},
        "WaitingForPersistentVolumeClaim",
        ["spec.storage[0].pvc.claimName:", "PersistentVolumeClaim 'night-data'",
         "namespace physics", "kubectl get pvc -n physics"]),
    "stage env secretKeyRef": (
        {"env": [SECRET_ENV]}, {},
        {"secrets": {"archive-token": None}}, {"secrets": {"archive-token": frozenset({"token"})}},
        "WaitingForSecret",
        ["spec.stages[1].env[0].valueFrom.secretKeyRef.name:", "Secret 'archive-token'",
         "kubectl create secret generic archive-token -n physics --from-literal=token=..."]),
    "step env secretKeyRef key": (
        {"steps": [{"name": "main", "command": ["true"], "env": [{"name": "A", "value": "1"},
                                                                 SECRET_ENV]}]}, {},
        {"secrets": {"archive-token": frozenset({"tokn"})}},
        {"secrets": {"archive-token": frozenset({"tokn", "token"})}},
        "WaitingForSecret",
        ["spec.stages[1].steps[0].env[1].valueFrom.secretKeyRef.key:",
         "Secret 'archive-token' has no key 'token'",
         "kubectl edit secret archive-token -n physics"]),
    "env configMapKeyRef": (
        {"env": [CM_ENV]}, {},
        {"config_maps": {"calibration": None}},
        {"config_maps": {"calibration": frozenset({"epoch"})}},
        "WaitingForConfigMap",
        ["spec.stages[1].env[0].valueFrom.configMapKeyRef.name:", "ConfigMap 'calibration'",
         "kubectl create configmap calibration -n physics --from-literal=epoch=..."]),
    "env configMapKeyRef key": (
        {"steps": [{"name": "main", "command": ["true"], "env": [CM_ENV]}]}, {},
        {"config_maps": {"calibration": frozenset()}},
        {"config_maps": {"calibration": frozenset({"epoch"})}},
        "WaitingForConfigMap",
        ["spec.stages[1].steps[0].env[0].valueFrom.configMapKeyRef.key:",
         "ConfigMap 'calibration' has no key 'epoch'"]),
    "s3 credentialsSecret": (
        {"outputs": [{"storage": "raw", "path": "o/{item}/"}]}, {"storage": S3},
        {"secrets": {"s3-keys": None}}, {"secrets": {"s3-keys": CREDS}},
        "WaitingForSecret",
        ["spec.storage[0].s3.credentialsSecret:", "Secret 's3-keys'",
         "--from-literal=AWS_ACCESS_KEY_ID=... --from-literal=AWS_SECRET_ACCESS_KEY=..."]),
    "pool maxCPU": (
        {"pool": "gpu", "resources": {"requests": {"cpu": "96", "memory": "8Gi"}}},
        {"virtualCluster": "chiles"},
        {"virtual_clusters": {"chiles": {"status": RECONCILED, "spec": {"pools": [
            {"name": "compute"}, {"name": "gpu", "maxCPU": 64}]}}}},
        {"virtual_clusters": {"chiles": {"status": RECONCILED, "spec": {"pools": [
            {"name": "compute"}, {"name": "gpu", "maxCPU": 128, "maxMemory": "1Ti"}]}}}},
        "WaitingForVirtualCluster",
        ["spec.stages[1].resources: one pod asks for 96 CPU, more than pool 'gpu' of "
         "VirtualCluster 'chiles' may hold in all (maxCPU 64)", "raise the pool's maxCPU"]),
    "pool maxMemory": (
        {"pool": "gpu", "resources": {"limits": {"memory": "512Gi"}}},
        {"virtualCluster": "chiles"},
        {"virtual_clusters": {"chiles": {"status": RECONCILED, "spec": {"pools": [
            {"name": "compute"}, {"name": "gpu", "maxMemory": "256Gi"}]}}}},
        {"virtual_clusters": {"chiles": {"status": RECONCILED, "spec": {"pools": [
            {"name": "compute"}, {"name": "gpu", "maxMemory": "1Ti"}]}}}},
        "WaitingForVirtualCluster",
        ["spec.stages[1].resources: one pod asks for 512Gi of memory, more than pool 'gpu'",
         "(maxMemory 256Gi)"]),
    "s3 credentialsSecret key": (
        {"forEach": {"fromS3": {"storage": "raw"}}}, {"storage": S3},
        {"secrets": {"s3-keys": frozenset({"AWS_ACCESS_KEY_ID"})}},
        {"secrets": {"s3-keys": CREDS}},
        "WaitingForSecret",
        ["spec.storage[0].s3.credentialsSecret:", "Secret 's3-keys' has no key "
         "'AWS_SECRET_ACCESS_KEY'"]),
}


@pytest.mark.parametrize("kind", TABLE)
def test_bad_reference_table(kind: str) -> None:
    needing, spec_fields, missing, fixed, reason, parts = TABLE[kind]
    run = make_run(_stages(needing), **spec_fields)
    if "virtualCluster" in spec_fields:
        # Pools for both stages, so only the reference under test is missing.
        run["spec"]["stages"][0]["pool"] = "compute"
    p = plan(_obs(run, **missing))
    prog = condition(p, "Progressing")
    # False while nothing runs (Pending); True once the other stage runs, still naming it.
    moving = "False" if kind == "virtualCluster" else "True"
    assert (prog["status"], prog["reason"]) == (moving, reason), prog
    for part in parts:
        assert part in prog["message"], (part, prog["message"])
    assert condition(p, "Invalid")["status"] == "False"
    started = [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)]
    assert "needs" not in started
    assert started == ([] if kind == "virtualCluster" else ["free"])
    assert p.requeue_after == 30.0  # looked at again: the object may be created
    # Created (or fixed): the waiting stage starts, and nothing waits any more.
    later = advance(run, p)
    later["status"]["stages"] = []  # jobs not under test: as if the pass had not run
    p2 = plan(replace(_obs(later, **fixed), jobs=[]))
    assert "needs" in [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p2)]
    assert condition(p2, "Progressing")["reason"] not in (
        reason, "WaitingForStorage"), condition(p2, "Progressing")


def test_claims_only_of_pvc_storages_some_stage_uses() -> None:
    s = PipelineRunSpec.model_validate(make_run(
        [stage("a", inputs=[{"storage": "data", "path": "x"}]),
         stage("b", mounts=[{"storage": "shared", "mountPath": "/shared"}])],
        storage=[{"name": "data", "pvc": {"claimName": "d"}},
                 {"name": "shared", "pvc": {"claimName": "s"}},
                 {"name": "unused", "pvc": {"claimName": "u"}}])["spec"])
    assert references.claims(s) == ["d", "s"]
    r = references.check(s, "physics", {}, volume_claims={"d": True, "s": False})
    assert r.waiting_stages == {"b"} and r.reason == references.REASON_CLAIM


def test_items_from_a_missing_config_map_wait_naming_field_and_object() -> None:
    """forEach.fromConfigMap is read when the stage is about to start
    (itemsource.resolve); missing, the stage waits as ItemsUnresolved."""
    run = make_run([stage("needs", forEach={"fromConfigMap": {"name": "nights"}})])
    spec = PipelineRunSpec.model_validate(run["spec"])

    class NoConfigMaps:
        def get(self, *_: Any) -> None:
            return None

    with pytest.raises(ResolveError) as e:
        resolve(NoConfigMaps(), "physics", spec, spec.stages[0],  # type: ignore[arg-type]
                OperatorConfig.from_env())
    assert not e.value.invalid
    p = plan(replace(observe(run), unresolved={"needs": (str(e.value), False)}))
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("False", "ItemsUnresolved")
    assert prog["message"].startswith("stage needs: spec.stages[0].forEach.fromConfigMap: "
                                      "ConfigMap physics/nights does not exist")


def test_optional_and_unread_references_are_not_checked() -> None:
    optional = {"name": "T", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k",
                                                             "optional": True}}}
    s = PipelineRunSpec.model_validate(make_run(_stages({"env": [optional, CM_ENV]}))["spec"])
    assert references.names_of(s, references.SECRET) == []
    assert references.names_of(s, references.CONFIGMAP) == ["calibration"]
    # The operator may not read it (403): left out, nothing waits.
    assert references.check(s, "physics", {}, secrets={}, config_maps={}).waiting == []


def test_one_read_per_distinct_object_and_credentials_only_for_their_users() -> None:
    s = PipelineRunSpec.model_validate(make_run(
        [stage("free", env=[SECRET_ENV]),
         stage("needs", steps=[{"name": "a", "command": ["x"], "env": [SECRET_ENV]},
                               {"name": "b", "command": ["y"], "env": [SECRET_ENV]}],
               outputs=[{"storage": "raw", "path": "o/{item}/"}])],
        storage=S3)["spec"])
    assert references.names_of(s, references.SECRET) == ["archive-token", "s3-keys"]
    creds = [r for r in references.objects(s) if r.name == "s3-keys"]
    assert {r.key for r in creds} == CREDS and all(r.stages == {"needs"} for r in creds)
    r = references.check(s, "physics", {}, secrets={"archive-token": None, "s3-keys": CREDS})
    assert r.waiting_stages == {"free", "needs"} and len(r.waiting) == 3
    assert r.reason == references.REASON_SECRET


class SecretsRefused(RecordingKube):
    """An operator without the Secret grant (the chart's default)."""

    def _call(self, method: str, path: str, body: Any = None,
              query: Sequence[tuple[str, Any]] = (), content_type: str | None = None,
              accept: str = "application/json") -> Obj:
        if "/secrets/" in path:
            raise KubeError(403, "Forbidden", "secrets is forbidden")
        return super()._call(method, path, body, query, content_type, accept)


def _pass(kube: RecordingKube) -> tuple[dict[str, Any], list[str]]:
    """One reconcile pass of a run whose only stage needs Secret archive-token: the
    run's Progressing condition and the Jobs in the store."""
    pipelinerun.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly",
                          pipelinerun.LoopState())
    run = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")]
    prog = next(c for c in run["status"]["conditions"] if c["type"] == "Progressing")
    return prog, [p for p in kube.store if "/jobs/" in p]


def _secret(**data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "archive-token", "namespace": "physics"}, "data": data}


def test_reconcile_reads_the_secret_by_name_and_starts_once_it_exists() -> None:
    run = make_run([stage("needs", env=[SECRET_ENV])])
    kube = RecordingKube([run])
    prog, jobs = _pass(kube)
    assert prog["reason"] == "WaitingForSecret" and jobs == []
    assert ("", "secrets", "get", "namespace") in kube.calls
    assert ("", "secrets", "list", "namespace") not in kube.calls
    kube.put(_secret(other="c2VjcmV0"))
    prog, jobs = _pass(kube)
    assert prog["reason"] == "WaitingForSecret" and "has no key 'token'" in prog["message"]
    assert "c2VjcmV0" not in json.dumps(kube.store[next(
        p for p in kube.store if "/pipelineruns/" in p)])  # values never reach the run
    kube.put(_secret(token="c2VjcmV0"))
    prog, jobs = _pass(kube)
    assert prog["reason"] != "WaitingForSecret" and len(jobs) == 1


def test_a_secret_the_operator_may_not_read_is_not_checked() -> None:
    kube = SecretsRefused([make_run([stage("needs", env=[SECRET_ENV])])])
    prog, jobs = _pass(kube)
    assert prog["reason"] != "WaitingForSecret" and len(jobs) == 1


def test_a_finished_run_reads_no_secrets_unless_a_rerun_is_asked() -> None:
    run = make_run([stage("needs", env=[SECRET_ENV])])
    run["status"] = {"phase": "Succeeded", "rerunFailed": 0}
    kube = RecordingKube([run])
    pipelinerun.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly",
                          pipelinerun.LoopState())
    assert ("", "secrets", "get", "namespace") not in kube.calls
    run["spec"]["rerunFailed"] = 1
    kube = RecordingKube([run])
    pipelinerun.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly",
                          pipelinerun.LoopState())
    assert ("", "secrets", "get", "namespace") in kube.calls


def _vc_with(reason: str, message: str, invalid: str = "") -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "False", "reason": reason, "message": message}]
    if invalid:
        conds.append({"type": "Invalid", "status": "True", "reason": "InvalidSpec",
                      "message": invalid})
    return {**VC, "status": {**RECONCILED, "conditions": conds}}


@pytest.mark.parametrize(("vc", "said"), [
    (_vc_with("Invalid", "the spec is invalid (see the Invalid condition); nothing was applied",
              "spec.pools[1].instanceTypes[0]: 'm9.huge' is not an EC2 instance type"),
     "is not Ready (Invalid: spec.pools[1].instanceTypes[0]: 'm9.huge' is not an EC2 "
     "instance type)"),
    (_vc_with("ProviderUnavailable", "provider aws needs Karpenter's CRDs: nodepools.karpenter.sh"),
     "is not Ready (ProviderUnavailable: provider aws needs Karpenter's CRDs: "
     "nodepools.karpenter.sh)"),
])
def test_a_virtual_cluster_that_applied_nothing_holds_every_stage(vc: dict[str, Any],
                                                                  said: str) -> None:
    r = references.check(spec(), "radio", {"chiles": vc})
    assert r.waiting_stages == {"split", "invert", "concat"}
    (msg,) = r.waiting
    assert msg.startswith(f"spec.virtualCluster: VirtualCluster 'chiles' {said}"), msg
    assert "kubectl describe virtualcluster chiles -n radio" in msg


def test_a_virtual_cluster_not_reconciled_yet_holds_every_stage() -> None:
    """Its status.mode decides the pods' node affinity, and a Job is never re-rendered."""
    r = references.check(spec(), "radio", {"chiles": {"spec": VC["spec"]}})
    assert r.waiting_stages == {"split", "invert", "concat"}
    assert r.reason == references.REASON
    (msg,) = r.waiting
    assert msg.startswith("spec.virtualCluster: VirtualCluster 'chiles' has no status.mode "
                          "yet: the operator has not reconciled it"), msg
    assert "an operator watching namespace radio" in msg
    assert "kubectl describe virtualcluster chiles -n radio" in msg
    later = references.check(spec(), "radio", {"chiles": VC})
    assert later.waiting_stages == {"concat"}  # only the pool it lacks, as before


@pytest.mark.parametrize("reason", ["NotReady", "NoNodes"])
def test_a_virtual_cluster_still_coming_up_holds_nothing(reason: str) -> None:
    # A NodePool not Ready yet, or static pools without labeled nodes: pods wait for nodes.
    r = references.check(spec(), "radio", {"chiles": _vc_with(reason, "not yet")})
    assert r.waiting_stages == {"concat"}  # only the pool it lacks, as before


def test_a_virtual_cluster_invalid_after_it_applied_holds_nothing() -> None:
    # Its earlier NodePools stay and still launch nodes: the stages start.
    vc = _vc_with("Invalid", "the spec is invalid", "spec.pools[1].instanceTypes[0]: 'm9.huge'")
    vc["status"]["appliedGeneration"] = 3
    r = references.check(spec(), "radio", {"chiles": vc})
    assert r.waiting_stages == {"concat"}  # only the pool it lacks, as before
