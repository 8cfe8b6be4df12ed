"""The fan-out bench on any cluster (`fanout.py --any-cluster`): real nodes, real pods.

The local bed shares two cores between its control plane, KWOK and the bench, and two
runs of the same thing there differ by more than the 5 % the fan-out goal asks to
resolve (docs/performance.md, "Where the goal stands"). This runs the same alternating
pairs on a cluster whose control plane has machines of its own (EKS, or kind on a big
host): the KUBECONFIG's, with each item a real container running `sleep`.

What it cannot see there, it does not report: no audit log (the operator's writes per
item), no part PIDs (CPU per part, renice, the idle wait between runs: a fixed settle
instead), no host probe (the local machine is not the cluster). What it needs:
- nodes labeled `nightshift.io/pool=<pool>` (a managed node group, or nodes labeled by
  hand), ready before the bench; a NoSchedule taint of the same key and value is tolerated;
- Nightshift's CRDs (applied from crds/ if the cluster has none), and an operator: the
  installed one (`--operator installed`, the chart's, watching every namespace) or one
  the bench starts on this machine, watching only the run's namespace (`local`);
- rights to create namespaces, Jobs and PipelineRuns and to delete pods.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jobbench import ROOT, Bench, console

from nightshift.api import names
from nightshift.kube import Kube

# Pullable from any EKS node without Docker Hub's rate limit.
IMAGE = "public.ecr.aws/docker/library/busybox:1.36"


class NoAudit:
    """No audit log to read: every run's entries are none."""

    def mark(self) -> int:
        return 0

    def since(self, offset: int) -> list[dict[str, Any]]:
        return []


class NoBeside:
    """No host probe or profiles: the machine the bench runs on is not the cluster."""

    def __enter__(self) -> NoBeside:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def finish(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class Layout:
    """What runside.start_operator reads of a layout: where the log goes, and the env."""

    kubeconfig: str
    logs: Path

    def operator_env(self) -> dict[str, str]:
        return {"KUBECONFIG": self.kubeconfig} if self.kubeconfig else {}


def task_stage(task_s: float, pool: str, image: str) -> dict[str, Any]:
    """The stage fields that make each item a real `sleep` on the pool's nodes (no KWOK
    annotations): the same on both sides, as the bare Job is the run's Job stripped."""
    return {"pool": pool, "image": image, "podAnnotations": {},
            "steps": [{"name": "main", "command": ["sleep", f"{task_s:g}"]}]}


class ClusterBench(Bench):
    """Bench's interface on the KUBECONFIG's cluster: drains by counting pods, then waits
    a fixed `settle` (the parts' CPU is not visible from here)."""

    def __init__(self, kubeconfig: str, settle: float) -> None:
        self.kube = Kube.for_user(kubeconfig or None)
        self.layout = Layout(kubeconfig, ROOT / "bench" / "results" / "logs")
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        self.audit = NoAudit()  # type: ignore[assignment]
        self.audited = False
        self.pids = {}
        self.nice = 0
        self.profile = None
        self.settle = settle
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    def beside(self, label: str) -> NoBeside:  # type: ignore[override]
        return NoBeside()

    def renice(self, nice: int, pids: list[int] | None = None) -> None:
        return None  # the cluster's processes are not this machine's

    def cpu(self) -> dict[str, float]:
        return {}

    def cpu_since(self, before: dict[str, float]) -> dict[str, float]:
        return {}

    def quiet(self, threshold: float = 0.15, settle: int = 2, timeout: float = 120) -> float:
        time.sleep(self.settle)
        return self.settle

    def ensure_nodes(self, count: int) -> None:
        raise RuntimeError("--any-cluster uses the cluster's own nodes; it makes none")

    def pool_nodes(self, pool: str) -> list[str]:
        """The Ready nodes of the pool, by name."""
        out = []
        for n in self.kube.list("v1", "Node", label_selector=f"{names.LABEL_POOL}={pool}"):
            conds = (n.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                out.append(n["metadata"]["name"])
        return sorted(out)


def prepared_any(kubeconfig: str, pool: str, namespaces: tuple[str, ...],
                 settle: float) -> ClusterBench:
    """The bench on the KUBECONFIG's cluster: refuses a pool without Ready nodes, applies
    the CRDs only where none exist (an installed chart's are left as they are)."""
    bench = ClusterBench(kubeconfig, settle)
    ready = bench.pool_nodes(pool)
    if not ready:
        raise SystemExit(f"no Ready node labeled {names.LABEL_POOL}={pool}: label a node "
                         f"group's nodes so (kubectl label node <name> "
                         f"{names.LABEL_POOL}={pool}), or pass --pool with a label that has "
                         "nodes")
    console.print(f"pool {pool}: {len(ready)} Ready nodes")
    for f in sorted((ROOT / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and bench.kube.get(doc["apiVersion"], doc["kind"],
                                      doc["metadata"]["name"]) is None:
                console.print(f"applying {doc['metadata']['name']} from {f.name}")
                bench.kube.apply(doc)
    for ns in namespaces:
        bench.ensure_namespace(ns)
    return bench

