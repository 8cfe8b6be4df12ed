"""Fan-out benchmark: a PipelineRun stage against a bare Indexed Job of the same size.

Not part of CI. On the local cluster (`.venv/bin/nightshift-localcluster up` first; it
reads the API server's audit log):

    .venv/bin/python bench/fanout.py                  # 3,000 and 10,000 items of 1 s
    .venv/bin/python bench/fanout.py --sizes 1000 10000 100000 --run-only
    .venv/bin/python bench/fanout.py --sizes 1000 10000 100000 --run-only --batch 50
    .venv/bin/python bench/fanout.py --sizes 3000 --pairs 5 --baseline full

On any other cluster (EKS: a control plane with machines of its own), real pods on the
nodes labeled nightshift.io/pool=<pool>, each item `sleep 1` (bench/anycluster.py):

    .venv/bin/python bench/fanout.py --any-cluster --pool bench --sizes 3000 --warmup 500

`--baseline full` pairs the run with its own rendered Job, unchanged, created by the
bench: both sides run the same pods, so the ratio is what the operator and the
PipelineRun cost beyond them, and its spread is the bed's own. `--fresh-cluster`
restarts the local cluster before every run instead of draining it between runs.

For each size, in the same cluster, `--pairs` alternating pairs (bare then run, run
then bare, ...), the namespace drained between runs (bench/jobbench.py):
- time to done: from the bare Job's create call to its Complete condition, and from the
  PipelineRun's create call to its Succeeded phase (what a person waits for); the ratio
  bare / PipelineRun in each pair, median over the pairs, is the PipelineRun's speed
  ratio (target >= 0.95). The bare
  Job is the operator's own rendered Job with every feature removed (bench/ablation.py
  says what each feature costs), on the same KWOK nodes, with the same tasks;
- the operator's API write calls per item (audit log, user nightshift-operator; target
  <= 0.01), its peak RSS (VmHWM; target <= 200 MB) and the run's status size.
Results go to bench/results/fanout-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from anycluster import IMAGE, prepared_any, task_stage
from freshcluster import restarted
from hostspeed import side_ratio_fit
from jobbench import (
    POOL,
    Bench,
    console,
    loadavg,
    prepared,
    print_parts,
    results_path,
    run_job,
    stats,
)
from jobvariants import kwok_task, only, rendered_job
from profiles import Window
from rich.table import Table
from runside import NS_JOB, NS_RUN, drain_run, peak_rss_mb, run_pipelinerun, start_operator


def cluster_cpu(run: dict[str, Any]) -> float:
    return float(sum(v for k, v in run["cpu_s"].items() if k != "other"))


def measured_host(runs: list[dict[str, Any]]) -> bool:
    """Every run has the host probe's figure (not on --any-cluster: no probe there)."""
    return all((r.get("host") or {}).get("chunk_ms") for r in runs)


def host_adjusted(runs: list[dict[str, Any]]) -> list[float]:
    """Each pair's bare / PipelineRun time with each side's time divided by its host
    chunk (bench/hostspeed.py): the ratio had both sides had cores of the same speed."""
    def per_ms(r: dict[str, Any]) -> float:
        return float(r["done_s"]) / float(r["host"]["chunk_ms"])
    bare = {r["pair"]: per_ms(r) for r in runs if r["side"] == "bare"}
    run = {r["pair"]: per_ms(r) for r in runs if r["side"] == "run"}
    return [round(bare[p] / run[p], 3) for p in sorted(bare) if p in run]


def _more(extra: dict[str, Any]) -> str:
    """The run side's Job times, where known (its creation is the audit log's)."""
    if not extra:
        return ""
    created = extra.get("job_created_s")
    return (f" (its Job done at {extra['job_done_s']} s"
            + (f", created at {created} s)" if created is not None else ")"))


def _audited(bench: Bench, t: Any) -> str:
    """What the audit log says of a run; nothing where there is none (--any-cluster)."""
    if not bench.audited:
        return ""
    return f"last create {t.last_create_s} s  others' API writes {t.foreign_writes}  "


def one_size(bench: Bench, n: int, task_s: float, pairs: int, nice: int = 0,
             run_only: bool = False, batch: int = 1, baseline: str = "bare",
             fresh: Callable[[], Bench] | None = None, task: dict[str, Any] | None = None,
             own_operator: bool = True, warmup: int = 0) -> dict[str, Any]:
    """`fresh`: a new cluster before every run (bench/freshcluster.py), with its own
    operator; otherwise one cluster and one operator, drained between runs. `task`: the
    stage fields of a real task (--any-cluster) instead of the KWOK one, on both sides;
    `own_operator` False: the cluster's installed operator reconciles the run. `warmup`:
    a bare Job of that many items first, not recorded (images pulled on every node)."""
    console.print(f"[bold]{n:,} items of {task_s:g} s[/], "
                  + ("the PipelineRun once" if run_only else f"{pairs} alternating pairs")
                  + (f", {batch} items per pod" if batch > 1 else "")
                  + f"; load average now {loadavg()}")
    # A batched stage (run-only): ceil(n / K) pods, each pod's KWOK task K tasks long.
    pods = -(-n // batch)
    batched: dict[str, Any] = ({"batch": batch, "podAnnotations": kwok_task(batch * task_s)}
                               if batch > 1 else {})
    extra_stage = task or {}
    bare, bare_cms = rendered_job(n, NS_JOB, task_s, **extra_stage)
    if baseline == "bare":
        bare, bare_cms = only(bare, []), []
    timeout = max(600.0, n / 5)
    runs: list[dict[str, Any]] = []
    rss = 0.0

    def operator_for(b: Bench) -> subprocess.Popen[bytes]:
        o = start_operator(b)
        b.pids["operator"] = o.pid
        if nice:
            b.renice(nice, [o.pid])
        return o

    def stop(o: subprocess.Popen[bytes]) -> float:
        peak = peak_rss_mb(o.pid)
        bench.pids.pop("operator", None)
        o.send_signal(signal.SIGTERM)
        o.wait(30)
        return peak

    # With fresh clusters, the bench passed in may be a cluster already gone (its API
    # server's port changes with every `up`): every run starts its own.
    op = None if fresh or not own_operator else operator_for(bench)
    try:
        if fresh is None:
            bench.drain(NS_JOB)
            drain_run(bench)
        if warmup:
            warm, _ = rendered_job(warmup, NS_JOB, task_s, **extra_stage)
            t = run_job(bench, only(warm, []), [], f"warm-up, {warmup:,} items", timeout)
            console.print(f"  warm-up, a bare Job of {warmup:,} items: {t.done_s:.2f} s "
                          f"(not counted); drain {bench.drain(NS_JOB):.0f} s")
        rounds = 1 if run_only else pairs
        for p in range(rounds):
            order = ("run",) if run_only else ("bare", "run") if p % 2 == 0 else ("run", "bare")
            for side in order:
                label = f"pair {p + 1}/{rounds} {side}"
                if fresh is not None:
                    rss = max(rss, stop(op)) if op else rss
                    bench = fresh()
                    op = operator_for(bench)
                if side == "bare":
                    t = run_job(bench, json.loads(json.dumps(bare)), bare_cms, label, timeout)
                    extra: dict[str, Any] = {}
                    # A fresh cluster replaces the drain: the next run starts clean anyway.
                    drain_s = 0.0 if fresh else bench.drain(NS_JOB)
                else:
                    t, extra = run_pipelinerun(bench, n, task_s, label, timeout,
                                               pods=pods, **(extra_stage | batched))
                    drain_s = 0.0 if fresh else drain_run(bench)
                runs.append({"pair": p + 1, "side": side, "done_s": t.done_s,
                             "last_create_s": t.last_create_s, "last_bind_s": t.last_bind_s,
                             "load_start": t.load_start, "load_end": t.load_end,
                             "drain_s": round(drain_s, 1), "cpu_s": t.cpu,
                             "foreign_writes": t.foreign_writes, "pod_work": t.pod_work,
                             "host": t.host, **extra})
                console.print(f"  {label:18} {t.done_s:7.2f} s{_more(extra)}  "
                              f"{pods / t.done_s:5.1f} pods/s  " + _audited(bench, t)
                              + f"load {t.load_start}->{t.load_end}  drain {drain_s:.0f} s")
                print_parts(t)
    finally:
        rss = max(rss, stop(op)) if op else rss
    bare_s = [r["done_s"] for r in runs if r["side"] == "bare"]
    run_s = [r["done_s"] for r in runs if r["side"] == "run"]
    job_s = [r["job_done_s"] for r in runs if r["side"] == "run"]
    last_run = [r for r in runs if r["side"] == "run"][-1]
    run_side = {
        "items": n, "task_s": task_s, "batch": batch, "pods": pods, "runs": runs,
        "baseline": baseline,
        "pipelinerun_s": stats(run_s), "pipelinerun_job_s": stats(job_s),
        "operator_writes": last_run["operator_writes"],
        "writes_per_item": last_run["writes_per_item"], "write_kinds": last_run["write_kinds"],
        "operator_peak_rss_mb": round(rss, 1) if own_operator else None,
        "status_bytes": last_run["status_bytes"],
    }
    if run_only:
        return run_side | {"run_only": True}
    host = measured_host(runs)
    adjusted = host_adjusted(runs) if host else []
    bare_cpu = [cluster_cpu(r) for r in runs if r["side"] == "bare"]
    run_cpu = [cluster_cpu(r) for r in runs if r["side"] == "run"]
    return run_side | {
        "pairs": pairs, "bare_s": stats(bare_s),
        # Per pair, then the median: a slow stretch of the machine hits both sides of a
        # pair, not one side of the whole comparison.
        "speed_ratio": stats([round(b / r, 3) for b, r in zip(bare_s, run_s, strict=True)])[1],
        "speed_ratio_of_medians": round(stats(bare_s)[1] / stats(run_s)[1], 3),
        "fresh_cluster": fresh is not None,
        "speed_ratio_job": round(stats(bare_s)[1] / stats(job_s)[1], 3),
        # The same ratio on CPU seconds the cluster's parts (and the operator) used: far
        # less sensitive than wall time to what else runs on a shared machine.
        "cpu_ratio": (round(stats(bare_cpu)[1] / stats(run_cpu)[1], 3)
                      if stats(run_cpu)[1] else None),
        "pair_speed_ratio": [round(b / r, 3) for b, r in zip(bare_s, run_s, strict=True)],
        "pair_speed_ratio_host": adjusted,
        "speed_ratio_host": stats(adjusted)[1] if adjusted else None,
        "host_fit": side_ratio_fit(runs) if host else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[3000, 10000])
    ap.add_argument("--task-seconds", type=float, default=1.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--baseline", choices=("bare", "full"), default="bare",
                    help="the Job the PipelineRun is paired with: the bare Job (the goal's "
                         "measure), or the operator's own Job unchanged, created by the "
                         "bench (what the run costs beyond its pods)")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--run-only", action="store_true",
                    help="only the PipelineRun, once per size (its time, the operator's "
                         "writes, peak RSS and status size; no bare Job, no ratio)")
    ap.add_argument("--batch", type=int, default=1,
                    help="with --run-only: K items per pod (stages[].batch), so 100,000 "
                         "items fit this test bed as 100,000 / K pods")
    ap.add_argument("--renice", type=int, default=0,
                    help="run the cluster's parts at this nice value meanwhile (e.g. -10 on "
                         "a shared machine; put back to 0 at the end)")
    ap.add_argument("--fresh-cluster", action="store_true",
                    help="restart the local cluster (down, up --no-real-node) before every "
                         "run, so no run inherits etcd's history or the parts' heaps from "
                         "the runs before it (bench/freshcluster.py)")
    ap.add_argument("--profile", metavar="DELAY:SECONDS",
                    help="CPU profiles of the API server, controller-manager and scheduler "
                         "over this window of every run (e.g. 30:120; the API server's "
                         "needs `nightshift-localcluster up --profiling`); bench/profiles.py")
    anyc = ap.add_argument_group(
        "any cluster", "the same pairs on the KUBECONFIG's cluster, real pods (anycluster.py)")
    anyc.add_argument("--any-cluster", action="store_true",
                      help="run on the KUBECONFIG's cluster's nodes instead of the local "
                           "bed's KWOK nodes; each item a real `sleep --task-seconds`")
    anyc.add_argument("--kubeconfig", default="",
                      help="with --any-cluster: this kubeconfig (default: KUBECONFIG, then "
                           "~/.kube/config)")
    anyc.add_argument("--pool", default=POOL,
                      help="with --any-cluster: the nodes labeled nightshift.io/pool=POOL")
    anyc.add_argument("--image", default=IMAGE,
                      help="with --any-cluster: the task's image (it needs sleep and /bin/sh)")
    anyc.add_argument("--operator", choices=("installed", "local"), default="installed",
                      help="with --any-cluster: the cluster's installed operator (the "
                           "chart's, watching every namespace) or one started here, "
                           "watching only the run's namespace")
    anyc.add_argument("--settle", type=float, default=30.0,
                      help="with --any-cluster: seconds to wait after each drain (the "
                           "control plane's idleness is not visible from here)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="a bare Job of this many items before each size, not recorded "
                         "(on real nodes: pull the image on every node first)")
    args = ap.parse_args()
    if args.any_cluster:
        try:
            return any_cluster(args)
        except RuntimeError as e:  # a run that did not finish: what the bench saw
            console.print(f"[red]{e}[/]")
            return 1
    try:
        window = Window.parse(args.profile) if args.profile else None
    except ValueError as e:
        ap.error(str(e))
    if args.batch < 1 or (args.batch > 1 and not args.run_only):
        ap.error("--batch K needs K >= 1, and K > 1 only with --run-only (the bare Job "
                 "side has one pod per item)")
    bench = prepared(args.nodes, (NS_JOB, NS_RUN), args.renice)
    bench.profile = window
    release = bench.server_version()

    def fresh() -> Bench:
        b = restarted(args.nodes, (NS_JOB, NS_RUN), args.renice, window is not None)
        b.profile, b.stamp = window, bench.stamp
        return b

    console.print(f"API server: Kubernetes {release}")
    path = results_path("fanout", stamp=bench.stamp)
    results = []
    for n in args.sizes:
        results.append(one_size(bench, n, args.task_seconds, args.pairs, args.renice,
                                args.run_only, args.batch, args.baseline,
                                fresh=fresh if args.fresh_cluster else None,
                                warmup=args.warmup))
        path.write_text(json.dumps({"results": results, "nodes": args.nodes, "pool": POOL,
                                    "renice": args.renice,
                                    "kubernetes": release}, indent=2))
    return report(args, results, path)


def any_cluster(args: argparse.Namespace) -> int:
    """--any-cluster: the KUBECONFIG's cluster, its pool's nodes, real `sleep` pods."""
    for flag, bad in (("--fresh-cluster", args.fresh_cluster), ("--profile", args.profile),
                      ("--renice", args.renice)):
        if bad:
            raise SystemExit(f"{flag} is for the local bed; --any-cluster cannot restart, "
                             "profile or renice another cluster's parts: leave it out")
    if args.batch > 1 and not args.run_only:
        raise SystemExit("--batch K > 1 needs --run-only (the bare Job has a pod per item)")
    bench = prepared_any(args.kubeconfig, args.pool, (NS_JOB, NS_RUN), args.settle)
    release = bench.server_version()
    console.print(f"API server: Kubernetes {release}; operator: {args.operator}")
    task = task_stage(args.task_seconds, args.pool, args.image)
    path = results_path("fanout-any", stamp=bench.stamp)
    results = []
    for n in args.sizes:
        results.append(one_size(bench, n, args.task_seconds, args.pairs, 0, args.run_only,
                                args.batch, args.baseline, task=task,
                                own_operator=args.operator == "local", warmup=args.warmup))
        path.write_text(json.dumps({"results": results, "cluster": "any", "pool": args.pool,
                                    "nodes": len(bench.pool_nodes(args.pool)),
                                    "image": args.image, "operator": args.operator,
                                    "settle_s": args.settle, "kubernetes": release},
                                   indent=2))
    return report(args, results, path)


def _fig(x: float | None, fmt: str = "{}") -> str:
    return "—" if x is None else fmt.format(x)


def report(args: argparse.Namespace, results: list[dict[str, Any]], path: Path) -> int:
    if args.run_only:
        table = Table(title="PipelineRun alone: time to done and the operator's cost")
        for col in ("items", "pods", "PipelineRun s", "its Job done s", "writes", "writes/item",
                    "peak RSS MB", "status bytes"):
            table.add_column(col, justify="right")
        for r in results:
            table.add_row(f"{r['items']:,}", f"{r['pods']:,}", f"{r['pipelinerun_s'][1]:.1f}",
                          f"{r['pipelinerun_job_s'][1]:.1f}", _fig(r["operator_writes"]),
                          _fig(r["writes_per_item"]), _fig(r["operator_peak_rss_mb"]),
                          f"{r['status_bytes']:,}")
        console.print(table)
        for r in results:
            console.print(f"{r['items']:,} items: operator writes {r['write_kinds']}")
        console.print(f"results: {path}")
        return 0
    # --baseline full: the "bare" side ran the run's own Job, unchanged.
    base = args.baseline
    table = Table(title=f"{base} Indexed Job vs PipelineRun: time to done, "
                        f"median of {args.pairs} alternating pairs")
    for col in ("items", f"{base} Job s (min/med/max)", "PipelineRun s (min/med/max)",
                "speed ratio", "per pair", "CPU ratio", "writes/item", "peak RSS MB",
                "status bytes"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(f"{r['items']:,}", "/".join(f"{x:.1f}" for x in r["bare_s"]),
                      "/".join(f"{x:.1f}" for x in r["pipelinerun_s"]),
                      f"{r['speed_ratio']:.3f}", " ".join(map(str, r["pair_speed_ratio"])),
                      _fig(r["cpu_ratio"], "{:.3f}"),
                      _fig(r["writes_per_item"]), _fig(r["operator_peak_rss_mb"]),
                      f"{r['status_bytes']:,}")
    console.print(table)
    for r in results:
        console.print(f"{r['items']:,} items: speed ratio on the run's Job completing "
                      f"{r['speed_ratio_job']:.3f}"
                      + (f"; operator writes {r['write_kinds']}" if r["write_kinds"] else ""))
        if r["speed_ratio_host"] is not None:
            console.print(f"{r['items']:,} items: host-adjusted speed ratio "
                          f"{r['speed_ratio_host']:.3f} (pairs {r['pair_speed_ratio_host']}); "
                          f"fitted on every run {r['host_fit']}")
    console.print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
