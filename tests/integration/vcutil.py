"""What the VirtualCluster integration tests share: manifests, lookups and the
`cleanup` and `static_node` fixtures (test_virtualcluster.py and
test_virtualcluster_lifecycle.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nightshift.api import names
from nightshift.kube import Kube, KubeError
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.catalog import parse_quantity
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess

FAST = {"pod-complete.stage.kwok.x-k8s.io/delay": "2s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s"}
KWOK_FAMILY = "karpenter.kwok.sh/instance-family"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
TERMINAL = ("Succeeded", "Failed", "Cancelled")


def suffix() -> str:
    return uuid.uuid4().hex[:5]


def vc_manifest(name: str, pools: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.VIRTUALCLUSTER,
            "metadata": {"name": name}, "spec": {"pools": pools, **spec}}


def stage(name: str, pool: str, items: int, cpu: str, memory: str | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
    return {"name": name, "pool": pool, "forEach": {"range": {"from": 1, "to": items}},
            "image": "busybox", "steps": [{"name": "main", "command": ["true"]}],
            "resources": {"requests": requests}, "podAnnotations": annotations or FAST}


def run_manifest(name: str, vc: str, stages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": name}, "spec": {"virtualCluster": vc, "stages": stages}}


def get_vc(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    return kube.get(names.API_VERSION, names.VIRTUALCLUSTER, name, ns)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


def phase(kube: Kube, ns: str, run: str) -> str:
    obj = kube.get(names.API_VERSION, names.PIPELINERUN, run, ns) or {}
    return str((obj.get("status") or {}).get("phase", ""))


def run_state(kube: Kube, ns: str, run: str, vc: str, pool: str) -> str:
    """The run's status, its pods and the pool's NodeClaims, for a timeout's message."""
    def conds(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (obj.get("status") or {}).get("conditions") or []]

    obj = kube.get(names.API_VERSION, names.PIPELINERUN, run, ns) or {}
    lines = [f"run {run}: phase={(obj.get('status') or {}).get('phase')!r} {conds(obj)}"]
    for p in kube.list("v1", "Pod", ns, label_selector=f"{names.LABEL_RUN}={run}"):
        lines.append(f"pod {p['metadata']['name']}: {(p.get('status') or {}).get('phase')} "
                     f"on {(p.get('spec') or {}).get('nodeName')!r} {conds(p)}")
    for c in pool_objects(kube, "NodeClaim", ns, vc, pool):
        meta = c["metadata"]
        lines.append(f"nodeclaim {meta['name']} {meta.get('labels', {}).get(CAPACITY_TYPE)} "
                     f"node={(c.get('status') or {}).get('nodeName')!r} "
                     f"deleting={bool(meta.get('deletionTimestamp'))} {conds(c)}")
    return "\n".join(lines)


def owner(ns: str, vc: str) -> str:
    return f"{names.LABEL_VIRTUAL_CLUSTER}={vc},{vcnames.LABEL_VC_NAMESPACE}={ns}"


def pool_objects(kube: Kube, kind: str, ns: str, vc: str, pool: str) -> list[dict[str, Any]]:
    api = {"Node": "v1", "NodeClaim": "karpenter.sh/v1", "NodePool": "karpenter.sh/v1"}[kind]
    return kube.list(api, kind, label_selector=f"{owner(ns, vc)},{names.LABEL_POOL}={pool}")


def claim_cpu(claims: list[dict[str, Any]]) -> float:
    """CPU as Karpenter counts it against a NodePool's limit: each NodeClaim's capacity."""
    return sum(parse_quantity(((c.get("status") or {}).get("capacity") or {}).get("cpu", 0))
               for c in claims)


@pytest.fixture
def cleanup(kube: Kube, operator: OperatorProcess) -> Iterator[list[str]]:
    """VirtualClusters to force-delete after the test, so no NodePool outlives it and
    the operator (session-scoped) is still there to remove the finalizer."""
    made: list[str] = []  # "namespace/name"
    yield made
    force = {"metadata": {"annotations": {names.ANNOTATION_FORCE_DELETE: "true"}}}
    for ref in made:
        ns, name = ref.split("/")
        try:
            kube.merge_patch(names.API_VERSION, names.VIRTUALCLUSTER, name, ns, force)
        except KubeError as e:
            if e.status != 404:  # already gone is fine
                raise
        kube.delete(names.API_VERSION, names.VIRTUALCLUSTER, name, ns)
    for ref in made:
        ns, name = ref.split("/")
        wait_for(f"VirtualCluster {ref} to be gone",
                 lambda ns=ns, name=name: get_vc(kube, ns, name) is None,  # type: ignore[misc]
                 90)


def create_vc(kubectl: Kubectl, cleanup: list[str], ns: str, manifest: dict[str, Any]) -> None:
    kubectl.apply(manifest, ns)
    cleanup.append(f"{ns}/{manifest['metadata']['name']}")


def ready(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    vc = wait_for(f"{ns}/{name} Ready", lambda: (v := get_vc(kube, ns, name)) and condition(
        v, "Ready").get("status") == "True" and v, 30,
        explain=lambda: str((get_vc(kube, ns, name) or {}).get("status")))
    return dict(vc)


def run_on_pool(kube: Kube, kubectl: Kubectl, ns: str, vc: str, run: str, pool: str,
                seconds: int) -> None:
    """A one-item run whose task holds a node of `pool` for `seconds`, once it has one."""
    kubectl.apply(run_manifest(run, vc, [stage("s", pool, 1, "1", annotations={
        "pod-complete.stage.kwok.x-k8s.io/delay": f"{seconds}s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s"})]), ns)
    wait_for("a node under the run", lambda: pool_objects(kube, "Node", ns, vc, pool), 60)


def succeeds(kube: Kube, ns: str, run: str, why: str = "") -> None:
    """Wait until `run` ends, and that it Succeeded."""
    wait_for(f"run {run} to finish", lambda: phase(kube, ns, run) in TERMINAL, 90,
             explain=lambda: str(kube.get(names.API_VERSION, names.PIPELINERUN, run, ns)))
    assert phase(kube, ns, run) == "Succeeded", why


@pytest.fixture
def static_node(kubectl: Kubectl) -> Iterator[tuple[str, str]]:
    """A KWOK node labeled and tainted by hand, as a kind or on-prem admin would."""
    u = suffix()
    node, pool = f"static-{u}", f"hand-{u}"
    kubectl.apply({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {names.LABEL_POOL: pool, "kubernetes.io/os": "linux",
                                "kubernetes.io/hostname": node, "type": "kwok"}},
        "spec": {"taints": [{"key": names.TAINT_POOL, "value": pool,
                             "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    })
    yield node, pool
    kubectl("delete", "node", node, "--wait=false", check=False)
