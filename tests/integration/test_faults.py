"""Faults under a running stage on the local cluster: the API server restarted, etcd
restarted, a node deleted. Each asserts the run succeeds with every item counted once:
one Job, completedIndexes 0..n-1, no failed index, the status's counts equal the items.

The restarts stop a part every test shares, so they are marked `disruptive` and
hack/integration.sh runs them alone after the rest; they need the local cluster (its
`nightshift-localcluster restart`) and skip on any other.
"""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.api import names, ranges
from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import Cluster, OperatorProcess
from tests.integration.prutil import jobs, kwok_node_pool, pipelinerun, stage, wait_phase

# 40 items at parallelism 10, each pod "running" 4-10 s on KWOK (about 12 s a pod here,
# with its start): the restarts come with 3 and about 12 items done, and the stage runs
# on for half a minute after them (60 items only made that tail longer).
ITEMS = 40
SLOW = {"pod-complete.stage.kwok.x-k8s.io/delay": "4s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "6s"}


def _start(kube: Kube, kubectl: Kubectl, namespace: str, pool: str, name: str) -> None:
    kubectl.apply(pipelinerun(name, namespace, [
        stage("work", pool, n=ITEMS, parallelism=10, podAnnotations=dict(SLOW))]))

    def some_done() -> bool:
        js = jobs(kube, namespace, name)
        return bool(js) and int((js[0].get("status") or {}).get("succeeded") or 0) >= 3

    wait_for("the stage under way", some_done, 90, interval=0.5)


def _exactly_once(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    run = wait_phase(kube, namespace, name, {"Succeeded", "Failed"}, 240)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    js = jobs(kube, namespace, name)
    assert len(js) == 1, [j["metadata"]["name"] for j in js]
    status = js[0]["status"]
    assert ranges.parse(status["completedIndexes"]) == list(range(ITEMS)), status
    assert not status.get("failedIndexes") and not status.get("failed"), status
    work = run["status"]["stages"][0]
    assert work["succeeded"] == ITEMS and work["failed"] == 0, work
    return run


def _restart(cluster: Cluster, part: str, down_for: float) -> None:
    """Stop `part`, keep it down, start it again (and revive parts that exit meanwhile).
    Blocks until it is back: the test's own reads would fail while the part is down."""
    if not cluster.local:
        pytest.skip("restarting a control-plane part needs the local cluster")
    from nightshift_localcluster import faults
    from nightshift_localcluster.paths import Layout

    faults.restart(Layout.discover(), part, down_for, say=print, revive_for=15.0)


@pytest.mark.disruptive
def test_api_server_then_etcd_restarted_mid_stage(
        cluster: Cluster, kube: Kube, kubectl: Kubectl, operator: OperatorProcess,
        namespace: str, pool: str) -> None:
    _start(kube, kubectl, namespace, pool, "restarts")
    for part in ("kube-apiserver", "etcd"):
        _restart(cluster, part, down_for=5)
    _exactly_once(kube, namespace, "restarts")
    assert operator.proc is not None and operator.proc.poll() is None, \
        "the operator died with the control plane"


def test_node_deleted_mid_stage_reruns_only_its_items(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str) -> None:
    """Two KWOK nodes in the pool; one is deleted with pods on it. The pod garbage
    collector fails those pods with DisruptionTarget (DeletionByPodGC), which the Job's
    pod failure policy ignores: their items run again on the other node, without using a
    retry, and are counted once."""
    pool = f"nd-{namespace[-6:]}"
    nodes = []
    for suffix in ("a", "b"):
        node = kwok_node_pool(pool)
        node["metadata"]["name"] = f"kwok-{pool}-{suffix}"
        node["metadata"]["labels"]["kubernetes.io/hostname"] = node["metadata"]["name"]
        kubectl.apply(node)
        nodes.append(node["metadata"]["name"])
    try:
        _start(kube, kubectl, namespace, pool, "node-loss")

        def victim() -> str | None:
            pods = kube.list("v1", "Pod", namespace,
                             label_selector=f"{names.LABEL_RUN}=node-loss",
                             field_selector="status.phase=Running")
            on = [p["spec"].get("nodeName") for p in pods]
            return next((n for n in nodes if n in on), None)

        doomed = wait_for("a node with running items", victim, 60, interval=0.5)
        kubectl("delete", "node", doomed, "--wait=false")
        _exactly_once(kube, namespace, "node-loss")
    finally:
        for n in nodes:
            kubectl("delete", "node", n, "--ignore-not-found", "--wait=false", check=False)
