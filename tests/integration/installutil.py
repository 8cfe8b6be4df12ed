"""What the chart-installed operator is tested with (test_install.py in its pod,
test_chart_rbac_live.py as a host process with its ServiceAccount's token): the
workload that needs the chart's RBAC, and the kubeconfig of a ServiceAccount."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.virtualcluster.objectnames import LABEL_VC_NAMESPACE
from tests.clusterutil import Kubectl, wait_for
from tests.integration.prutil import (
    pipelinerun,
    stage,
    stage_status,
    wait_phase,
    wait_progressing,
)

FAILING = {"nightshift.io/kwok-exit-codes": "true", "nightshift.io/kwok-delay": "500ms",
           "pod-complete.stage.kwok.x-k8s.io/weight": "0",
           "nightshift.io/kwok-exit-code-1": "42"}


def rbac_workload(kube: Kube, kubectl: Kubectl, namespace: str, pool: str) -> None:
    """A PipelineRun and a VirtualCluster that need the calls of their rows in
    operator/src/nightshift/kubecalls.py: items from a ConfigMap, a failed item's pods
    listed for its exit code, events, NodePools and KWOK node classes applied and pruned,
    the VirtualCluster's finalizer; and a run whose pods a LimitRange refuses, which the
    operator reads from its Job's events. Asserts each worked."""
    u = uuid.uuid4().hex[:5]
    kubectl("create", "configmap", "nights", "-n", namespace, "--from-literal=items=n1\nn2\nn3")
    kubectl.apply(pipelinerun("rbac", namespace, [
        stage("listed", pool, forEach={"fromConfigMap": {"name": "nights"}}),
        stage("reduce", pool, 3, dependsOn=["listed"], tolerateFailedItems=1,
              retries={"perItem": 1, "permanentExitCodes": [42]}, podAnnotations=FAILING),
        stage("after", pool, 1, dependsOn=["reduce"])]))
    # Above the others' 100m: only this run's pods are refused.
    kubectl.apply({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "small"},
                   "spec": {"limits": [{"type": "Container", "max": {"cpu": "500m"}}]}},
                  namespace)
    kubectl.apply(pipelinerun("refused", namespace, [
        stage("big", pool, 1, resources={"requests": {"cpu": "1"}, "limits": {"cpu": "1"}})]))
    kubectl.apply({"apiVersion": names.API_VERSION, "kind": names.VIRTUALCLUSTER,
                   "metadata": {"name": "vc", "namespace": namespace},
                   "spec": {"nodeClass": {"kwok": {"nodeRegistrationDelay": "5s"}},
                            "pools": [{"name": f"w{u}", "class": "compute", "maxCPU": 8},
                                      {"name": f"m{u}", "class": "memory", "maxCPU": 8}]}})

    run = wait_phase(kube, namespace, "rbac", {"Succeeded", "Failed"}, 300)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert stage_status(run, "listed")["succeeded"] == 3
    reduce = stage_status(run, "reduce")
    assert (reduce["succeeded"], reduce["failed"]) == (2, 1), reduce
    # Failure samples come from listing the Job's failed pods.
    assert 42 in {s.get("exitCode") for s in reduce.get("failureSamples", [])}, reduce
    events = kubectl("get", "events", "-n", namespace, "--field-selector",
                     "involvedObject.name=rbac", "-o", "json").stdout
    assert json.loads(events)["items"], "the operator posted no event on the run"
    # The refused run's Job events were listed (the events rule's list verb).
    refused = wait_progressing(kube, namespace, "refused", "PodsNotCreated", timeout=90)
    assert "maximum cpu usage per Container is 500m" in refused["message"], refused
    kubectl("delete", "pipelinerun", "refused", "-n", namespace)
    kubectl("delete", "limitrange", "small", "-n", namespace)

    def vc_ready() -> dict[str, Any] | None:
        obj = kube.get(names.API_VERSION, names.VIRTUALCLUSTER, "vc", namespace) or {}
        conds = {c["type"]: c["status"]
                 for c in (obj.get("status") or {}).get("conditions") or []}
        return obj if conds.get("Ready") == "True" else None

    obj = wait_for("VirtualCluster vc Ready", vc_ready, 90, 1)
    assert obj["status"]["poolCount"] == 2 and obj["status"]["provider"] == "kwok"
    owned = f"{LABEL_VC_NAMESPACE}={namespace}"
    assert len(kube.list("karpenter.sh/v1", "NodePool", label_selector=owned)) >= 2
    columns = kubectl("get", "nsvc", "vc", "-n", namespace).stdout
    assert f"w{u}=0 m{u}=0" in columns, columns
    # Deletion: the finalizer, NodePools and node classes pruned by the operator.
    kubectl("delete", "virtualcluster", "vc", "-n", namespace, "--wait=false")
    wait_for("VirtualCluster vc gone", lambda: kube.get(
        names.API_VERSION, names.VIRTUALCLUSTER, "vc", namespace) is None, 90, 1)
    assert kube.list("karpenter.sh/v1", "NodePool", label_selector=owned) == []


def assert_nothing_forbidden(log: str) -> None:
    """A call the chart does not grant: kube.py's KubeError and kopf's APIForbiddenError
    both say "forbidden" (the API server's 403); no other log line does."""
    lines = [ln for ln in log.splitlines() if "forbidden" in ln.lower()]
    assert not lines, "the operator was refused calls:\n" + "\n".join(lines[:20])


def service_account_kubeconfig(kubectl: Kubectl, service_account: str, namespace: str,
                               path: Path) -> str:
    """A kubeconfig that authenticates as the ServiceAccount (a bound token, 1 h): the
    admin kubeconfig's server and CA, the token as its only credential."""
    token = kubectl("create", "token", service_account, "-n", namespace,
                    "--duration=1h").stdout.strip()
    admin = yaml.safe_load(kubectl("config", "view", "--raw", "--minify").stdout)
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster["name"],
                                                "user": service_account}}],
        "current-context": "sa"}))
    return str(path)
