"""`kubectl nightshift status` at 20,000 and 100,000 items: time and bytes read.

Not part of CI. Needs a cluster in KUBECONFIG with room for a namespace; no operator:
the bench creates each PipelineRun, writes a status made by the real planner
(pipelinerun/plan.py) from synthetic Job states, and freezes the items ConfigMaps as
the operator would. No Jobs are created: the first stage succeeded with every item
(so `items` of it needs no Job), the second is half done with every 10th item of that
half failed (5,000 at 100k), scattered so its failedItems is cut, with failure samples.

    KUBECONFIG=... .venv/bin/python bench/plugin.py              # 20,000 and 100,000
    KUBECONFIG=... .venv/bin/python bench/plugin.py --sizes 1000 --repeat 3

Per size it reports, over --repeat runs: `status` in-process (API read + render; bytes
of response bodies counted at the client), `status` as a fresh process (what a person
waits for, Python start-up included), and `items --stage split` (every item value:
the whole frozen list is read). Results go to bench/results/plugin-<time>.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml
from rich.console import Console
from rich.table import Table

from nightshift.api import names, ranges
from nightshift.cli import plugin
from nightshift.kube import Kube
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import ItemsInfo, Observed

console = Console()
CRD = "pipelineruns.nightshift.io"
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


class Counting:
    """Wraps the API client: counts the bytes of every response body read."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self.bytes = 0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        resp = self._api.call_api(*args, **kwargs)
        self.calls += 1
        self.bytes += len(resp.read() or b"")
        return resp


def run_object(name: str, namespace: str, n: int) -> dict[str, Any]:
    each = {"range": {"from": 0, "to": n - 1, "format": "night-{:06d}"}}
    stage = {"image": "busybox:1.36", "steps": [{"name": "main", "command": ["true"]}],
             "tolerateFailedItems": min(10_000, n)}
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"suspend": True, "stages": [
                {**stage, "name": "split", "forEach": each},
                {**stage, "name": "invert", "forEach": each, "dependsOn": ["split"]},
                {**stage, "name": "concat", "dependsOn": ["invert"],
                 "tolerateFailedItems": 0}]}}


def _with(job: dict[str, Any], **status: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(job))
    out["metadata"]["creationTimestamp"] = "2025-03-01T12:00:00Z"
    out["status"] = status
    return dict(out)


def synthetic_status(run: dict[str, Any], n: int) -> dict[str, Any]:
    """The status plan() writes after stage 1 succeeded and stage 2 got halfway with
    every 10th item failing (the scattered worst case of tests/unit/test_status_size.py,
    in one stage)."""
    infos = {s: ItemsInfo(n, (it.items_configmap_name(run["metadata"]["name"], s, 0),))
             for s in ("split", "invert")}
    spec = dict(run["spec"], suspend=False)  # plan as if running, then keep the counters
    live = {**run, "spec": spec}

    def obs(jobs: list[dict[str, Any]], samples: dict[str, Any]) -> Observed:
        return Observed(run=live, jobs=jobs, items=infos, failure_samples=samples, now=NOW,
                        runner_image="runner:bench")

    (split,) = [m for m in plan(obs([], {})).apply if m["kind"] == "Job"]
    split = _with(split, completedIndexes=f"0-{n - 1}", succeeded=n,
                  conditions=[{"type": "Complete", "status": "True",
                               "lastTransitionTime": "2025-03-01T13:00:00Z"}])
    p = plan(obs([split], {}))
    live["status"] = p.status
    (invert,) = [m for m in p.apply if m["kind"] == "Job"]
    half = list(range(0, n // 2, 10))
    samples = [{"index": i, "exitCode": 3, "reason": "Error", "message": "x" * 200}
               for i in half[:3]]
    invert = _with(invert, completedIndexes=ranges.compress(
        sorted(set(range(n // 2)) - set(half))), failedIndexes=ranges.compress(half),
        succeeded=n // 2 - len(half), failed=len(half), active=min(5000, n // 20),
        ready=min(5000, n // 20))
    return plan(obs([split, invert], {"invert": samples})).status


def ensure_crd(kube: Kube) -> None:
    if kube.crd_exists(CRD):
        return
    kube.apply(yaml.safe_load((ROOT / "crds" / "pipelinerun.yaml").read_text()))
    for _ in range(60):
        crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD) or {}
        if any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or []):
            return
        time.sleep(1)
    raise SystemExit(f"CRD {CRD} did not become Established")


def create(kube: Kube, namespace: str, n: int) -> str:
    name = f"bench-plugin-{n}"
    obj = run_object(name, namespace, n)
    kube.delete(names.API_VERSION, names.PIPELINERUN, name, namespace)
    for _ in range(60):
        if kube.get(names.API_VERSION, names.PIPELINERUN, name, namespace) is None:
            break
        time.sleep(1)
    created = kube.apply(obj)
    # The created object carries the generation the status must say it observed.
    status = synthetic_status(created, n)
    kube.patch_status(names.API_VERSION, names.PIPELINERUN, name, namespace, status)
    ref = it.RunRef.of(created)
    for stage in ("split", "invert"):
        items = [f"night-{i:06d}" for i in range(n)]
        for cm in it.items_configmaps(ref, stage, items, last_step="main"):
            kube.apply(cm)
    return name


def measure(kube: Kube, counter: Counting, argv: list[str], repeat: int) -> dict[str, Any]:
    times, sizes, calls = [], set(), set()
    for _ in range(repeat):
        counter.bytes = counter.calls = 0
        args = plugin.parser().parse_args(argv)
        out = Console(file=io.StringIO(), width=120)
        stdout, sys.stdout = sys.stdout, io.StringIO()  # items writes to stdout directly
        t0 = time.perf_counter()
        try:
            code = plugin.dispatch(args, kube=kube, out=out, err=out)
        finally:
            sys.stdout = stdout
        times.append(time.perf_counter() - t0)
        if code != 0:
            raise SystemExit(f"{' '.join(argv)} exited {code}: {out.file.getvalue()}")  # type: ignore[attr-defined]
        sizes.add(counter.bytes)
        calls.add(counter.calls)
    return {"argv": argv, "seconds": _stats(times), "bytes_read": sorted(sizes),
            "api_calls": sorted(calls)}


def measure_process(argv: list[str], repeat: int) -> dict[str, Any]:
    exe = str(Path(sys.executable).with_name("kubectl-nightshift"))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([exe, *argv], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return {"argv": ["kubectl-nightshift", *argv], "seconds": _stats(times)}


def _stats(xs: list[float]) -> dict[str, float]:
    return {"min": round(min(xs), 4), "median": round(statistics.median(xs), 4),
            "max": round(max(xs), 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    ap.add_argument("--namespace", default="nightshift-bench-plugin")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="leave the runs for exploring")
    args = ap.parse_args()
    if not os.environ.get("KUBECONFIG"):
        raise SystemExit("set KUBECONFIG to the cluster to measure on (the bench does not "
                         "start one: make cluster-up, then nightshift-localcluster env)")
    kube = Kube.for_user()
    counter = Counting(kube._api)
    kube._api = counter
    ensure_crd(kube)
    if kube.get("v1", "Namespace", args.namespace) is None:
        kube.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": args.namespace}})
    results = []
    for n in args.sizes:
        name = create(kube, args.namespace, n)
        base = ["-n", args.namespace]
        run = kube.get(names.API_VERSION, names.PIPELINERUN, name, args.namespace) or {}
        row = {"items_per_stage": n, "status_bytes": len(json.dumps(run.get("status"))),
               "status": measure(kube, counter, ["status", name, *base], args.repeat),
               "status_json": measure(kube, counter, ["status", name, "-o", "json", *base],
                                      args.repeat),
               "status_process": measure_process(["status", name, *base], args.repeat),
               "items_all": measure(kube, counter, ["items", name, "--stage", "split",
                                                    *base], args.repeat)}
        results.append(row)
        if not args.keep:
            kube.delete(names.API_VERSION, names.PIPELINERUN, name, args.namespace)
    table = Table(title="kubectl nightshift (median of "
                        f"{args.repeat}; bytes = response bodies read)")
    for col in ("items/stage", "status bytes", "status s", "status read", "process s",
                "items (all) s", "items read"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(f"{r['items_per_stage']:,}", f"{r['status_bytes']:,}",
                      f"{r['status']['seconds']['median']:.3f}",
                      f"{r['status']['bytes_read'][0]:,} B / {r['status']['api_calls'][0]}",
                      f"{r['status_process']['seconds']['median']:.2f}",
                      f"{r['items_all']['seconds']['median']:.2f}",
                      f"{r['items_all']['bytes_read'][0]:,} B / "
                      f"{r['items_all']['api_calls'][0]}")
    console.print(table)
    out = ROOT / "bench" / "results" / f"plugin-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                               "repeat": args.repeat, "results": results}, indent=2))
    console.print(f"results: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
