"""Fan-out benchmark: a PipelineRun stage against a bare Indexed Job of the same size.

Not part of CI. On the local cluster (it reads the API server's audit log):

    .venv/bin/python bench/fanout.py                 # 1,000 and 10,000 items
    .venv/bin/python bench/fanout.py --sizes 100000  # the 100k check

For each size, in the same cluster and the same run:
- time to all pods created: from the object's creation (the bare Job, or the
  PipelineRun) to the API server receiving the last pod create of that run; the ratio
  PipelineRun / bare Job is the operator's overhead (target <= 1.1);
- the operator's API write calls per item (audit log, user nightshift-operator;
  target <= 0.01);
- the operator's peak RSS (VmHWM; target <= 200 MB) and the run's status size (target
  <= 16 KB at 100k).
Tasks take 0 s (KWOK). Results go to bench/results/fanout-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from nightshift.api import names
from nightshift.kube import Kube
from nightshift_localcluster import cluster as lc
from nightshift_localcluster.components import Qps
from nightshift_localcluster.paths import Layout
from tests.clusterutil import Kubectl

console = Console()
ZERO = {"pod-complete.stage.kwok.x-k8s.io/delay": "0s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s"}
POOL = "bench"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def nodes(count: int) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        name = f"kwok-bench-{i}"
        out.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {names.LABEL_POOL: POOL, "kubernetes.io/hostname": name,
                                    "type": "kwok"}},
            "spec": {"taints": [{"key": names.TAINT_POOL, "value": POOL,
                                 "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "5000"},
                       "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "5000"}},
        })
    return out


def pipelinerun(n: int, parallelism: int) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
        "metadata": {"name": "fan"},
        "spec": {"stages": [{
            "name": "items", "pool": POOL, "image": "busybox:1.36",
            "forEach": {"range": {"from": 0, "to": n - 1, "format": "item-{:06d}"}},
            "steps": [{"name": "main", "command": ["true"]}],
            "parallelism": parallelism, "retries": {"perItem": 3},
            "tolerateFailedItems": n // 10, "podAnnotations": ZERO,
        }]},
    }


class Audit:
    """Reads the API server's audit log from an offset: entries since a mark."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def since(self, offset: int) -> list[dict[str, Any]]:
        files = [(self.path, offset)]
        if self.path.stat().st_size < offset:
            # Rotated since the mark: the rest of the old file, then all of the new one.
            rotated = sorted(self.path.parent.glob("audit-*.log"), key=lambda p: p.stat().st_mtime)
            if not rotated:
                raise RuntimeError("the audit log was rotated and its backup is gone")
            files = [(rotated[-1], offset), (self.path, 0)]
        out = []
        for path, start in files:
            with path.open("rb") as f:
                f.seek(start)
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        return out


def ts(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(
        entry["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def pod_creates(entries: list[dict[str, Any]], namespace: str) -> list[float]:
    return sorted(ts(e) for e in entries
                  if e.get("verb") == "create" and e.get("stage") == "ResponseComplete"
                  and (e.get("objectRef") or {}).get("resource") == "pods"
                  and (e.get("objectRef") or {}).get("namespace") == namespace
                  and not (e.get("objectRef") or {}).get("subresource")
                  and int((e.get("responseStatus") or {}).get("code", 0)) < 300)


def created_at(entries: list[dict[str, Any]], namespace: str, resource: str) -> float:
    for e in entries:
        ref = e.get("objectRef") or {}
        if (e.get("verb") in ("create", "patch") and ref.get("resource") == resource
                and ref.get("namespace") == namespace and not ref.get("subresource")
                and e.get("stage") == "ResponseComplete"):
            return ts(e)
    raise RuntimeError(f"no create of {resource} in {namespace} in the audit log")


def wait_job_done(kube: Kube, namespace: str, n: int, label: str, timeout: float) -> None:
    with Progress(TextColumn(f"  {label}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(label, total=n)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = kube.list("batch/v1", "Job", namespace)
            done = sum(int((j.get("status") or {}).get("succeeded") or 0) for j in jobs)
            bar.update(task, completed=done)
            if jobs and all(any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                                for c in (j.get("status") or {}).get("conditions") or [])
                            for j in jobs):
                return
            time.sleep(1)
    raise RuntimeError(f"{label}: not done after {timeout}s")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def copy_as_bare(kube: Kube, kubectl: Kubectl, src_ns: str, dst_ns: str) -> None:
    """Submit the PipelineRun's own Job (and its items ConfigMaps) by hand in dst_ns.

    Same pod template, same size: the only difference left is the operator.
    """
    for cm in kube.list("v1", "ConfigMap", src_ns, label_selector=f"{names.LABEL_RUN}=fan"):
        kubectl.apply({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": cm["metadata"]["name"]},
                       "data": cm.get("data") or {}}, dst_ns)
    job = kube.list("batch/v1", "Job", src_ns, label_selector=f"{names.LABEL_RUN}=fan")[0]
    spec = job["spec"]
    spec.pop("selector", None)
    spec["suspend"] = False
    labels = spec["template"]["metadata"].get("labels") or {}
    for k in [k for k in labels if k.startswith(("batch.kubernetes.io/", "controller-uid",
                                                 "job-name"))]:
        del labels[k]
    kubectl.apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bare"},
                   "spec": spec}, dst_ns)


def one_size(n: int, layout: Layout, kube: Kube, kubectl: Kubectl, audit: Audit,
             parallelism: int) -> dict[str, Any]:
    console.print(f"[bold]{n:,} items[/] (parallelism {parallelism})")
    tag = f"{n}-{int(time.time()) % 100000}"
    ns_job, ns_run = f"bench-job-{tag}", f"bench-run-{tag}"
    for ns in (ns_job, ns_run):
        kubectl("create", "namespace", ns)
    timeout = max(300.0, n / 10)

    log = layout.logs / f"bench-operator-{tag}.log"
    env = {**os.environ, **layout.operator_env()}
    with log.open("wb") as out:
        op = subprocess.Popen([sys.executable, "-m", "nightshift.cli.main", "operator",
                               "--health-port", "0", "--namespace", ns_run],
                              stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        time.sleep(3)  # let kopf start its watches: not part of the measured run
        mark = audit.mark()
        kubectl.apply(pipelinerun(n, parallelism), ns_run)
        wait_job_done(kube, ns_run, n, "PipelineRun", timeout)
        for _ in range(60):  # the final status write follows the Job's completion
            run = kube.get(names.API_VERSION, names.PIPELINERUN, "fan", ns_run) or {}
            if (run.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(1)
        rss = peak_rss_mb(op.pid)
    finally:
        op.send_signal(signal.SIGTERM)
        op.wait(30)
    entries = audit.since(mark)
    t0 = created_at(entries, ns_run, names.PIPELINERUNS)
    creates = pod_creates(entries, ns_run)
    run_s = creates[-1] - t0
    # This operator's writes only: other operators (tests) may share the identity.
    writes = [e for e in entries
              if (e.get("user") or {}).get("username") == "nightshift-operator"
              and e.get("verb") in WRITES and e.get("stage") == "ResponseComplete"
              and (e.get("objectRef") or {}).get("namespace") == ns_run]
    job_at = created_at(entries, ns_run, "jobs")
    status = run.get("status") or {}

    mark = audit.mark()
    copy_as_bare(kube, kubectl, ns_run, ns_job)
    wait_job_done(kube, ns_job, n, "the same Job, submitted by hand", timeout)
    entries = audit.since(mark)
    job_s = pod_creates(entries, ns_job)[-1] - created_at(entries, ns_job, "jobs")

    result = {
        "items": n, "parallelism": parallelism,
        "bare_job_s": round(job_s, 2), "pipelinerun_s": round(run_s, 2),
        "ratio": round(run_s / job_s, 3) if job_s > 0 else None,
        "pipelinerun_to_job_s": round(job_at - t0, 2),
        "pipelinerun_pods": len(creates),
        "operator_writes": len(writes),
        "writes_per_item": round(len(writes) / n, 5),
        "write_kinds": _kinds(writes),
        "operator_peak_rss_mb": round(rss, 1),
        "status_bytes": len(json.dumps(status)),
        "phase": status.get("phase"),
    }
    for ns in (ns_job, ns_run):
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
    return result


def _kinds(writes: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in writes:
        ref = w.get("objectRef") or {}
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        key = f"{w['verb']} {ref.get('resource')}{sub}"
        out[key] = out.get(key, 0) + 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--parallelism", type=int, default=0,
                    help="pods at once (default: all items, capped at 5000)")
    args = ap.parse_args()
    layout = Layout.discover()
    lc.up(layout, Qps(), lambda m: console.print(f"localcluster: {m}"))
    kube = Kube.from_env(str(layout.kubeconfig))
    kubectl = Kubectl(str(layout.kubeconfig))
    for f in sorted((ROOT / "crds").glob("*.yaml")):
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    for node in nodes(max(2, max(args.sizes) // 4000 + 1)):
        kubectl.apply(node)
    audit = Audit(layout.logs / "audit.log")
    results = []
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"fanout-{time.strftime('%Y%m%d-%H%M%S')}.json"
    for n in args.sizes:
        results.append(one_size(n, layout, kube, kubectl, audit,
                                args.parallelism or min(n, 5000)))
        console.print(results[-1])
        path.write_text(json.dumps({"results": results, "qps": Qps().qps}, indent=2))

    table = Table(title="PipelineRun vs bare Indexed Job (same cluster, same run)")
    for col in ("items", "bare Job s", "PipelineRun s", "ratio", "writes/item",
                "operator writes", "peak RSS MB", "status bytes"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(f"{r['items']:,}", str(r["bare_job_s"]), str(r["pipelinerun_s"]),
                      str(r["ratio"]), str(r["writes_per_item"]), str(r["operator_writes"]),
                      str(r["operator_peak_rss_mb"]), f"{r['status_bytes']:,}")
    console.print(table)
    for r in results:
        console.print(f"{r['items']:,} items, operator writes: {r['write_kinds']}")
    console.print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
