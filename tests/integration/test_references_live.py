"""References checked live: a run whose pods need a Secret (or a key of it) that does
not exist waits with a condition naming the field, the object and the fix, and starts
once it is created; the same for a ConfigMap key. Never a silent Pending pod."""

from __future__ import annotations

from nightshift.kube import Kube
from tests.clusterutil import Kubectl
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import pipelinerun, stage, wait_phase, wait_progressing


def test_a_missing_secret_then_a_missing_key_hold_the_stage_until_created(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "calib", "key": "token"}}},
           {"name": "BAND", "valueFrom": {"configMapKeyRef": {"name": "setup", "key": "band"}}}]
    kubectl.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "setup"},
                   "data": {"band": "L"}}, namespace)
    kubectl.apply(pipelinerun("refs", namespace, [
        stage("prep", pool, n=2),
        stage("calib", pool, n=2, dependsOn=["prep"], env=env)]))
    cond = wait_progressing(kube, namespace, "refs", "WaitingForSecret", "calib", 90)
    msg = cond["message"]
    assert "spec.stages[1].env[0].valueFrom.secretKeyRef" in msg, msg
    assert "kubectl create secret" in msg, msg
    # The Secret without the key: still waiting, now naming the key.
    kubectl("create", "secret", "generic", "calib", "-n", namespace, "--from-literal=other=x")
    cond = wait_progressing(kube, namespace, "refs", "WaitingForSecret", "has no key", 90)
    assert "secretKeyRef.key" in cond["message"] and "'token'" in cond["message"], cond
    kubectl("delete", "secret", "calib", "-n", namespace)
    kubectl("create", "secret", "generic", "calib", "-n", namespace, "--from-literal=token=t")
    run = wait_phase(kube, namespace, "refs", {"Succeeded", "Failed"}, 120)
    assert run["status"]["phase"] == "Succeeded", run["status"]
