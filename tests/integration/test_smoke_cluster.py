"""Foundation smoke tests: the local cluster's parts really work together."""

from __future__ import annotations

from typing import Any

from nightshift.kube import Kube
from tests.clusterutil import Kubectl, job_complete, wait_for


def _indexed_job(name: str, completions: int, extra: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "task", "image": "busybox",
                        "resources": {"requests": {"cpu": "100m"}}}],
        **(extra or {}),
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed", "completions": completions,
            "parallelism": completions,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "1s",
                                             "pod-complete.stage.kwok.x-k8s.io/jitter-delay":
                                             "1s"}},
                "spec": pod_spec,
            },
        },
    }


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    return next((c.get("status") for c in obj.get("status", {}).get("conditions", [])
                 if c.get("type") == kind), None)


def _karpenter_state(kube: Kube, namespace: str, pool: str) -> str:
    """The pods and NodeClaims a stuck wait is about."""
    pods = [(p["metadata"]["name"], p.get("status", {}).get("phase"), p["spec"].get("nodeName"))
            for p in kube.list("v1", "Pod", namespace)]
    claims = [(c["metadata"]["name"], c["metadata"]["labels"].get("kubernetes.io/os"),
               {k: _condition(c, k) for k in ("Launched", "Initialized", "Drifted")})
              for c in kube.list("karpenter.sh/v1", "NodeClaim",
                                 label_selector=f"karpenter.sh/nodepool={pool}")]
    return f"pods: {pods}\nnodeclaims: {claims}"


def test_indexed_job_completes_on_a_kwok_node(kube: Kube, kubectl: Kubectl,
                                              namespace: str) -> None:
    node = "kwok-smoke-static"
    kubectl.apply({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": node}},
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake",
                             "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                   "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
    })
    try:
        job = _indexed_job("smoke", 4, {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists",
                             "effect": "NoSchedule"}],
        })
        kubectl.apply(job, namespace)
        wait_for("the Indexed Job to complete", lambda: job_complete(kube, namespace, "smoke"),
                 90)
        got = kube.get("batch/v1", "Job", "smoke", namespace)
        assert got is not None
        assert got["status"]["succeeded"] == 4
        assert got["status"]["completedIndexes"] == "0-3"
    finally:
        kubectl("delete", "node", node, "--wait=false", check=False)


def test_karpenter_provisions_a_real_instance_type(kube: Kube, kubectl: Kubectl,
                                                   namespace: str) -> None:
    pool = f"smoke-{namespace}"
    kubectl.apply({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": pool},
        "spec": {
            "template": {
                "metadata": {"labels": {"smoke": pool}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                     "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In",
                         "values": ["spot"]},
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "karpenter.kwok.sh/instance-family", "operator": "In",
                         "values": ["c6i"]},
                    ],
                },
            },
            "limits": {"cpu": "64"},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5s"},
        },
    })
    try:
        kubectl.apply(_indexed_job("needs-node", 2, {"nodeSelector": {"smoke": pool}}),
                      namespace)
        wait_for("the Job on a Karpenter node to complete",
                 lambda: job_complete(kube, namespace, "needs-node"), 120,
                 explain=lambda: _karpenter_state(kube, namespace, pool))
        nodes = kube.list("v1", "Node", label_selector=f"karpenter.sh/nodepool={pool}")
        assert nodes, "Karpenter launched no node for the pending pods"
        labels = nodes[0]["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"].startswith("c6i.")
        assert labels["karpenter.sh/capacity-type"] == "spot"
        # The NodePool asks for Linux; a node labeled otherwise is drifted and replaced
        # over and over (the bed's catalog keeps only Linux entries for this).
        assert labels["kubernetes.io/os"] == "linux"
        drifted = [c["metadata"]["name"] for c in kube.list(
            "karpenter.sh/v1", "NodeClaim", label_selector=f"karpenter.sh/nodepool={pool}")
            if _condition(c, "Drifted") == "True"]
        assert not drifted, f"NodeClaims drifted from their NodePool: {drifted}"
        # The node's price annotation/label comes from the real EC2 catalog.
        assert float(labels["eks-node-viewer/instance-price"]) > 0
    finally:
        kubectl("delete", "nodepool", pool, "--wait=false", check=False)



def test_a_pod_deleted_before_it_started_ends_failed(kube: Kube, kubectl: Kubectl,
                                                     namespace: str) -> None:
    """Our KWOK stage hack/kwok/pod-delete-unstarted.yaml: a pod deleted while Pending,
    holding a finalizer (a Job's tracking finalizer; the taint-eviction controller racing
    Karpenter's registration once deleted one), becomes Failed, as a kubelet makes it.
    KWOK's own stages leave it Pending for ever, and a Job with podReplacementPolicy
    Failed then waits for it for ever."""
    node = "kwok-smoke-unstarted"
    kubectl.apply({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": node}},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                   "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
    })
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "unstarted", "namespace": namespace,
                        "finalizers": ["nightshift.io/test-hold"],
                        # KWOK's pod-create waits: the pod stays Pending meanwhile.
                        "annotations": {"pod-create.stage.kwok.x-k8s.io/delay": "300s",
                                        "pod-create.stage.kwok.x-k8s.io/jitter-delay":
                                        "300s"}},
           "spec": {"nodeName": node, "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}]}}
    try:
        kubectl.apply(pod)
        got = wait_for("the pod", lambda: kube.get("v1", "Pod", "unstarted", namespace), 10)
        assert (got.get("status") or {}).get("phase") == "Pending", got.get("status")
        kubectl("delete", "pod", "-n", namespace, "unstarted", "--wait=false")
        status = wait_for("the deleted pod Failed", lambda: (
            s := (kube.get("v1", "Pod", "unstarted", namespace) or {}).get("status") or {}
        ).get("phase") == "Failed" and s, 30)
        assert status["message"] == ("deleted before it started (KWOK, "
                                     "nightshift-pod-delete-unstarted)"), status
    finally:
        kube.merge_patch("v1", "Pod", "unstarted", namespace, {"metadata": {"finalizers": None}})
        kubectl("delete", "node", node, "--wait=false", check=False)
