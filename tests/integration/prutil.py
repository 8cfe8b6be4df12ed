"""Helpers for PipelineRun integration tests."""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import wait_for

# KWOK ends a pod after a duration drawn between delay and jitter-delay.
KWOK_FAST = {
    "pod-complete.stage.kwok.x-k8s.io/delay": "1s",
    "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1s",
}


def kwok_node_pool(pool: str) -> dict[str, Any]:
    """A KWOK node labeled and tainted as a Nightshift pool (static capacity)."""
    name = f"kwok-{pool}"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {names.LABEL_POOL: pool, "kubernetes.io/hostname": name,
                                "type": "kwok"}},
        "spec": {"taints": [{"key": names.TAINT_POOL, "value": pool,
                             "effect": "NoSchedule"}]},
        # Disk too: the squids request their disk cache as ephemeral storage.
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "500",
                                   "ephemeral-storage": "500Gi"},
                   "capacity": {"cpu": "64", "memory": "256Gi", "pods": "500",
                                "ephemeral-storage": "500Gi"}},
    }


def stage(name: str, pool: str, n: int = 4, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "pool": pool,
        "image": "busybox:1.36",
        "forEach": {"range": {"from": 1, "to": n, "format": "item-{:03d}"}},
        "steps": [{"name": "main", "command": ["true"]}],
        "resources": {"requests": {"cpu": "100m"}},
        "podAnnotations": dict(KWOK_FAST),
    }
    out.update(kw)
    return out


def pipelinerun(name: str, namespace: str, stages: list[dict[str, Any]],
                **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"stages": stages, **spec},
    }


def get_run(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    run = kube.get(names.API_VERSION, names.PIPELINERUN, name, namespace)
    assert run is not None, f"PipelineRun {namespace}/{name} is gone"
    return run


def wait_phase(kube: Kube, namespace: str, name: str, phases: set[str],
               timeout: float = 120) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run = get_run(kube, namespace, name)
        return run if (run.get("status") or {}).get("phase") in phases else None

    try:
        result: dict[str, Any] = wait_for(f"run {name} to reach {sorted(phases)}", check,
                                          timeout)
    except AssertionError:
        status = get_run(kube, namespace, name).get("status")
        raise AssertionError(f"run {name} never reached {sorted(phases)}; status: {status}"
                             ) from None
    return result


def wait_progressing(kube: Kube, namespace: str, name: str, reason: str,
                     containing: str = "", timeout: float = 60) -> dict[str, Any]:
    """The run's Progressing condition once it has `reason` (and `containing` in its
    message): what a run waiting on something says."""
    def check() -> dict[str, Any] | None:
        run = kube.get(names.API_VERSION, names.PIPELINERUN, name, namespace) or {}
        for c in (run.get("status") or {}).get("conditions") or []:
            if (c["type"] == "Progressing" and c.get("reason") == reason
                    and containing in c.get("message", "")):
                return dict(c)
        return None

    what = f"run {name}: Progressing {reason}" + (f" with {containing!r}" if containing else "")
    result: dict[str, Any] = wait_for(what, check, timeout, explain=lambda: str(
        (kube.get(names.API_VERSION, names.PIPELINERUN, name, namespace) or {}).get("status")))
    return result


def stage_status(run: dict[str, Any], stage_name: str) -> dict[str, Any]:
    for st in run["status"]["stages"]:
        if st["name"] == stage_name:
            return dict(st)
    raise AssertionError(f"no stage {stage_name} in status: {run['status']}")


def jobs(kube: Kube, namespace: str, run: str) -> list[dict[str, Any]]:
    return kube.list("batch/v1", "Job", namespace, label_selector=f"{names.LABEL_RUN}={run}")
