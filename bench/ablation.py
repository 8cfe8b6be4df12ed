"""Spec ablation: which part of a PipelineRun's stage Job costs fan-out time.

Not part of CI. On the local cluster (`.venv/bin/nightshift-localcluster up` first):

    .venv/bin/python bench/ablation.py                      # 3,000 items of 1 s, 3 rounds
    .venv/bin/python bench/ablation.py --items 1000 --rounds 5 --variants bare full
    .venv/bin/python bench/ablation.py --list               # the variants and features
    .venv/bin/python bench/ablation.py --real-node          # bare and full, 6 real pods

Every variant is the Job the operator renders for a one-stage PipelineRun
(bench/jobbench.py: render_job, the operator's own code) with features removed: `bare`
keeps none (only the placement that reaches the bench nodes), `+X` keeps only feature X,
`full` keeps all, `full+resources` / `full+affinity` render the stage with resources or a
virtual cluster (features the bench stage does not use otherwise). Each run creates the
Job, times it to Complete, and drains the namespace (no pod left, control plane idle)
before the next. Rounds alternate the order (forward, backward, ...) so a slow drift of
the machine does not land on one variant. `--fresh-cluster` restarts the local cluster
before every run instead of draining it. Results: bench/results/ablation-<time>.json.

`--real-node` runs the variants as real containers on the local cluster's real node
(`make images` first): the step prints its item, and the bench checks every pod's log,
so the items volume, run.sh and the image path are exercised, not only the API.

The machine's load average goes with each run: on a shared 2-core VM other work shows
up as time, and the table says how much was going on.
"""

from __future__ import annotations

import argparse
import atexit
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from freshcluster import restarted
from jobbench import (
    Bench,
    console,
    loadavg,
    print_parts,
    run_job,
    stats,
)
from jobvariants import FEATURES, on_real_node, only, rendered_job
from profiles import cpu_per_write, parts_total
from rich.table import Table

NAMESPACE = "bench-ablation"
# One feature at a time, grouped where the features are the same kind of cost.
VARIANTS: dict[str, list[str] | None] = {
    "bare": [],
    "+failurePolicy": ["failurePolicy"],
    "+replacement": ["replacement"],
    "+perIndex": ["perIndex"],
    "+itemsVolume": ["itemsVolume"],
    "+workVolume": ["workVolume"],
    "+labels+annotations": ["labels", "annotations"],
    "+wrapper+env": ["wrapper", "env", "serviceLinks", "terminationMessage"],
    "+policies": ["failurePolicy", "replacement", "perIndex"],
    "+volumes": ["itemsVolume", "workVolume"],
    "+security": ["security", "noToken"],
    "+noToken": ["noToken"],
    "full": None,
    # The full Job without the items volume and the run.sh wrapper it carries: the most
    # that taking the volume off a range stage's pods could save (the item would then be
    # computed from the completion index; the step's NIGHTSHIFT_ITEM is unset here, which
    # KWOK's pods never read). Against full: the volume's price inside the whole pod.
    "full-itemsVolume": [f.name for f in FEATURES if f.name not in ("itemsVolume", "wrapper")],
    # The bare Job padded with one annotation to the full pod's bytes: bytes without a
    # feature (one extra field), to tell a cost per byte from a cost per feature.
    "bare+padding": [],
    # The bare Job with as many more managed fields as the full pod has (short empty
    # annotations), then padded to its bytes: against bare+padding, a cost per managed
    # field (the field manager walks them on every write) from a cost per byte.
    "bare+fields": [],
    "full+resources": None,
    "full+affinity": None,
}
# The default: the Job-level policies together, the two volumes together, then pod
# metadata and the containers' wrapper and env; the finer variants are there to split
# a group that shows a cost.
DEFAULT = ["bare", "+policies", "+volumes", "+labels+annotations", "+wrapper+env", "+security",
           "full"]


# Real containers: the step prints its item (empty without run.sh, which sets it).
REAL_STEP: dict[str, Any] = {
    "image": "nightshift-runner:dev",
    "steps": [{"name": "main", "command": ["sh", "-c", 'echo "item=${NIGHTSHIFT_ITEM-}"']}]}


def variant_job(name: str, n: int, task_s: float, namespace: str = NAMESPACE, **stage: Any
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if name == "full+resources":
        return rendered_job(n, namespace, task_s, **stage,
                            resources={"requests": {"cpu": "100m", "memory": "64Mi"}})
    if name == "full+affinity":
        return rendered_job(n, namespace, task_s, virtual_cluster="bench-vc", **stage)
    job, cms = rendered_job(n, namespace, task_s, **stage)
    keep = VARIANTS[name]
    if keep is None:
        return job, cms
    # The items ConfigMaps go only with a variant that mounts them.
    return only(job, keep), cms if "itemsVolume" in keep else []


def pod_as_created(job: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The pod the Job controller would create for `index` (manageJob's additions)."""
    name = job["metadata"]["name"]
    tmpl = json.loads(json.dumps(job["spec"]["template"]))
    meta, spec = tmpl.setdefault("metadata", {}), tmpl["spec"]
    uid = "00000000-0000-0000-0000-000000000000"
    # A generated selector's labels (strategy.go generateSelector); none with our own.
    generated = ({} if job["spec"].get("manualSelector") else {
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
        "controller-uid": uid, "job-name": name})
    meta["labels"] = {**meta.get("labels", {}), **generated,
                      "batch.kubernetes.io/job-completion-index": str(index)}
    ann = {**meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(index)}
    if "backoffLimitPerIndex" in job["spec"]:
        ann["batch.kubernetes.io/job-index-failure-count"] = "0"
    meta["annotations"] = ann
    meta["generateName"] = f"{name}-{index}-"
    meta["namespace"] = job["metadata"]["namespace"]
    meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                "uid": uid, "controller": True, "blockOwnerDeletion": True}]
    spec["hostname"] = f"{name}-{index}"
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        c["env"] = [*c.get("env", []), {"name": "JOB_COMPLETION_INDEX", "valueFrom": {
            "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/"
                                      "job-completion-index']"}}}]
    return {"apiVersion": "v1", "kind": "Pod", **tmpl}


def stored_pod(bench: Bench, job: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server stores it at creation (a dry-run create: defaults and
    managedFields included, nothing written)."""
    path = bench.kube.path("v1", "Pod", NAMESPACE) + "?dryRun=All"
    return bench.kube._call("POST", path, pod_as_created(job))


def size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def managed_fields(obj: dict[str, Any]) -> int:
    """Entries in an object's managedFields sets, every manager's (a field and each
    of its parents' "." markers count once)."""
    def count(node: Any) -> int:
        return sum(1 + count(v) for v in node.values()) if isinstance(node, dict) else 0
    return sum(count(m.get("fieldsV1") or {}) for m in obj["metadata"].get("managedFields", []))


def created_sizes(bench: Bench, jobs: dict[str, tuple[dict[str, Any], Any]]
                  ) -> dict[str, tuple[int, int]]:
    """Each variant's pod as created: its bytes and its managed fields."""
    out = {}
    for v, (job, _) in jobs.items():
        stored = stored_pod(bench, job)
        out[v] = (size(stored), managed_fields(stored))
    return out


PADDING = "bench.nightshift.io/padding"


def pad_to_full(bench: Bench, jobs: dict[str, tuple[dict[str, Any], Any]]) -> None:
    """Give "bare+padding" an annotation that makes its pod, as created, as large as
    the full variant's (two dry-run creates: the annotation's overhead is measured)."""
    job = jobs["bare+padding"][0]
    target = size(stored_pod(bench, (jobs.get("full") or variant_job("full", 1, 1))[0]))
    ann = job["spec"]["template"]["metadata"].setdefault("annotations", {})
    ann[PADDING] = ""
    ann[PADDING] = "x" * max(0, target - size(stored_pod(bench, job)))


def fields_to_full(bench: Bench, jobs: dict[str, tuple[dict[str, Any], Any]]) -> None:
    """Give "bare+fields" one short empty annotation per managed field the full pod has
    beyond it, then pad the first one's value to the full pod's bytes."""
    job = jobs["bare+fields"][0]
    full = stored_pod(bench, (jobs.get("full") or variant_job("full", 1, 1))[0])
    ann = job["spec"]["template"]["metadata"].setdefault("annotations", {})
    extra = managed_fields(full) - managed_fields(stored_pod(bench, job))
    keys = [f"f{i:02d}" for i in range(max(extra, 1))]
    ann.update(dict.fromkeys(keys, ""))
    ann[keys[0]] = "x" * max(0, size(full) - size(stored_pod(bench, job)))


def cluster_cpu(run: dict[str, Any]) -> float:
    """CPU seconds the local cluster's own parts used during the run."""
    return float(sum(v for k, v in run["cpu_s"].items() if k != "other"))


def check_items(bench: Bench, variant: str, n: int) -> None:
    """Every pod ran and printed its own item (only run.sh sets it: full variants)."""
    seen = set()
    for pod in bench.kube.list("v1", "Pod", NAMESPACE):
        name = pod["metadata"]["name"]
        seen.add(bench.log(NAMESPACE, name).strip())
    want = ({f"item=item-{i:06d}" for i in range(n)} if variant.startswith("full")
            else {"item="})
    if not want <= seen:
        raise RuntimeError(f"{variant}: pods printed {sorted(seen)}, expected {sorted(want)}")
    console.print(f"      {variant}: {len(seen)} distinct item lines in the logs, as expected")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--task-seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--variants", nargs="+", default=DEFAULT, choices=list(VARIANTS))
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the unmeasured 1,000-item Job run first")
    ap.add_argument("--list", action="store_true", help="show variants and features, exit")
    ap.add_argument("--sizes", action="store_true",
                    help="print each variant's pod size as created (dry run), exit")
    ap.add_argument("--real-node", action="store_true",
                    help="real containers on the real node (default: 6 items, bare and full)")
    ap.add_argument("--fresh-cluster", action="store_true",
                    help="restart the local cluster before every run instead of draining "
                         "it (bench/freshcluster.py); no warm-up")
    ap.add_argument("--renice", type=int, default=0,
                    help="run the cluster's parts at this nice value meanwhile (e.g. -10 on "
                         "a shared machine; put back to 0 at the end)")
    args = ap.parse_args()
    if args.real_node:
        if "--items" not in sys.argv:
            args.items = 6
        if "--variants" not in sys.argv:
            args.variants = ["bare", "full"]
    if args.list:
        for f in FEATURES:
            console.print(f"  feature {f.name:14} {f.what}")
        for v, keep in VARIANTS.items():
            console.print(f"  variant {v:22} keeps {keep if keep is not None else 'all'}")
        return 0

    bench = Bench()
    if args.renice:
        bench.renice(args.renice)
        atexit.register(bench.renice, 0)
    bench.ensure_nodes(args.nodes)
    bench.ensure_namespace(NAMESPACE)
    jobs = {v: variant_job(v, args.items, args.task_seconds,
                           **(REAL_STEP if args.real_node else {}))
            for v in args.variants}
    if args.real_node:
        jobs = {v: (on_real_node(j), cms) for v, (j, cms) in jobs.items()}
    if "bare+padding" in jobs:
        pad_to_full(bench, jobs)
    if "bare+fields" in jobs:
        fields_to_full(bench, jobs)
    sizes = created_sizes(bench, jobs)
    for v, (nbytes, nfields) in sizes.items():
        console.print(f"  {v:22} {nbytes:6,} bytes, {nfields} managed fields as created")
    if args.sizes:
        return 0
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"ablation-{time.strftime('%Y%m%d-%H%M%S')}.json"
    runs: list[dict[str, Any]] = []
    timeout = max(600.0, args.items / 5)
    total = args.rounds * len(args.variants)
    console.print(f"[bold]ablation[/]: {args.items:,} items of {args.task_seconds:g} s, "
                  f"{len(args.variants)} variants x {args.rounds} rounds on {args.nodes} "
                  f"KWOK nodes; load average now {loadavg()}")
    if not args.fresh_cluster:
        console.print(f"  drained in {bench.drain(NAMESPACE):.1f} s")
    if args.warmup and not args.fresh_cluster:
        # A fresh cluster's first big Job pays for cold caches and heaps: not a variant's.
        warm, wcms = jobs[args.variants[-1]]
        warm = json.loads(json.dumps(warm))
        warm["spec"]["completions"] = warm["spec"]["parallelism"] = min(args.items, 1000)
        t = run_job(bench, warm, wcms, "warm-up (not measured)", timeout)
        console.print(f"  warm-up: {t.done_s} s, drained in {bench.drain(NAMESPACE):.0f} s")
    t_start = time.monotonic()
    for r in range(args.rounds):
        order = args.variants if r % 2 == 0 else list(reversed(args.variants))
        for v in order:
            k = len(runs) + 1
            job, cms = jobs[v]
            if args.fresh_cluster:
                bench = restarted(args.nodes, (NAMESPACE,), args.renice, profiling=False)
            t = run_job(bench, json.loads(json.dumps(job)), cms,
                        f"[{k}/{total}] round {r + 1} {v}", timeout)
            if args.real_node:
                check_items(bench, v, args.items)
            drain_s = 0.0 if args.fresh_cluster else bench.drain(NAMESPACE)
            runs.append({"variant": v, "round": r + 1, "items": args.items,
                         "done_s": t.done_s, "pods_per_s": round(args.items / t.done_s, 1),
                         "completion_s": t.completion_s, "last_create_s": t.last_create_s,
                         "last_bind_s": t.last_bind_s, "load_start": t.load_start,
                         "load_end": t.load_end, "pod_bytes": t.pod_bytes,
                         "drain_s": round(drain_s, 1), "cpu_s": t.cpu,
                         "foreign_writes": t.foreign_writes, "pod_work": t.pod_work,
                         "host": t.host, "managed_fields": sizes[v][1]})
            left = (time.monotonic() - t_start) / k * (total - k)
            console.print(f"  [{k}/{total}] {v:22} {t.done_s:7.2f} s  "
                          f"{args.items / t.done_s:5.1f} pods/s  last create {t.last_create_s} s"
                          f"  last bind {t.last_bind_s} s  pod {t.pod_bytes} B  "
                          f"load {t.load_start}->{t.load_end}  drain {drain_s:.0f} s  "
                          f"others' API writes {t.foreign_writes}  "
                          f"(about {left / 60:.0f} min left)")
            print_parts(t)
            path.write_text(json.dumps({"items": args.items, "task_s": args.task_seconds,
                                        "nodes": args.nodes, "renice": args.renice,
                                        "runs": runs}, indent=2))
    table = Table(title=f"{args.items:,} items of {args.task_seconds:g} s, "
                        f"{args.rounds} runs per variant")
    for col in ("variant", "min s", "median s", "max s", "median pods/s", "vs bare",
                "last create (med)", "last bind (med)", "pod bytes", "managed fields",
                "cluster CPU s (med)",
                "API server CPU s", "KWOK CPU s", "other CPU s", "load (med)",
                "parts µs/write/chunk-ms (med)", "per write vs bare"):
        table.add_column(col, justify="right")
    bare = stats([x["done_s"] for x in runs if x["variant"] == "bare"] or [0])[1]
    # The steadiest measure this bed has: the parts' CPU per pod write, host-adjusted.
    per_write = {v: parts_total(p) for v, p in cpu_per_write(runs, key="variant").items()}
    for v in args.variants:
        rs = [x for x in runs if x["variant"] == v]
        lo, med, hi = stats([x["done_s"] for x in rs])
        table.add_row(v, f"{lo:.1f}", f"{med:.1f}", f"{hi:.1f}", f"{args.items / med:.1f}",
                      f"{med / bare:.2f}" if bare else "",
                      f"{stats([x['last_create_s'] or 0 for x in rs])[1]:.1f}",
                      f"{stats([x['last_bind_s'] or 0 for x in rs])[1]:.1f}",
                      str(rs[0]["pod_bytes"]), str(sizes[v][1]),
                      f"{stats([cluster_cpu(x) for x in rs])[1]:.0f}",
                      f"{stats([x['cpu_s'].get('kube-apiserver', 0) for x in rs])[1]:.0f}",
                      f"{stats([x['cpu_s'].get('kwok', 0) for x in rs])[1]:.0f}",
                      f"{stats([x['cpu_s'].get('other', 0) for x in rs])[1]:.0f}",
                      f"{stats([x['load_start'] for x in rs])[1]:.1f}",
                      f"{per_write[v]:.0f}" if v in per_write else "",
                      f"{per_write[v] / per_write['bare']:.3f}"
                      if v in per_write and "bare" in per_write else "")
    console.print(table)
    console.print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
