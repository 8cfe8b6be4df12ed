"""Task batching: many tiny tasks as one pod each, or K tasks per pod.

Not part of CI. On the local cluster (`.venv/bin/nightshift-localcluster up` first):

    .venv/bin/python bench/batching.py                        # 10,000 tasks of 1 s, K = 50
    .venv/bin/python bench/batching.py --items 10000 --batch 50 --rounds 3 --renice -10

The Montage shape (docs/seeds.md): ten thousand short tasks. Two PipelineRuns of the
same stage through the same operator, on the same KWOK nodes: `per-task` (one pod per
task, `batch: 1`) and `batched` (`batch: K`, each pod running K tasks one after another,
so its KWOK task lasts K x the task's time). Rounds alternate the order (per-task then
batched, batched then per-task, ...) and the namespace is drained between runs
(bench/jobbench.py). Each run is timed from its create call to the run's Succeeded;
the table gives min/median/max, the pods each side made, the cluster's CPU seconds and
the operator's writes. KWOK runs no container, so this is the control plane's share of
a task's cost; on a real node each pod also pays its sandbox, image and volume set-up
(seconds), which batching divides by K as well.
Results: bench/results/batching-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fanout import cluster_cpu
from jobbench import POOL, console, loadavg, prepared, results_path, stats
from jobvariants import kwok_task
from rich.table import Table
from runside import NS_RUN, drain_run, peak_rss_mb, run_pipelinerun, start_operator


def side_args(side: str, n: int, task_s: float, k: int) -> tuple[int, dict[str, Any]]:
    """(pods, stage fields) for one side: the batched pod's task lasts K tasks."""
    if side == "per-task":
        return n, {}
    return -(-n // k), {"batch": k, "podAnnotations": kwok_task(k * task_s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--task-seconds", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=50, help="K, tasks per pod when batched")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--renice", type=int, default=0,
                    help="run the cluster's parts at this nice value meanwhile")
    args = ap.parse_args()
    n, task_s, k = args.items, args.task_seconds, args.batch
    if (n // 10) % k:
        ap.error(f"--items / 10 ({n // 10}, the stage's tolerateFailedItems) must be a "
                 f"multiple of --batch ({k})")
    bench = prepared(args.nodes, (NS_RUN,), args.renice)
    path = results_path("batching")
    console.print(f"[bold]{n:,} tasks of {task_s:g} s[/]: one pod per task vs {k} per pod, "
                  f"{args.rounds} alternating rounds; load average now {loadavg()}")
    op = start_operator(bench)
    bench.pids["operator"] = op.pid
    if args.renice:
        bench.renice(args.renice, [op.pid])
    runs: list[dict[str, Any]] = []
    try:
        drain_run(bench)
        for r in range(args.rounds):
            order = ("per-task", "batched") if r % 2 == 0 else ("batched", "per-task")
            for side in order:
                pods, extra = side_args(side, n, task_s, k)
                label = f"round {r + 1}/{args.rounds} {side}"
                timeout = max(600.0, n / 5)
                t, info = run_pipelinerun(bench, n, task_s, label, timeout, pods=pods, **extra)
                drain_s = drain_run(bench)
                runs.append({"round": r + 1, "side": side, "pods": pods, "done_s": t.done_s,
                             "last_create_s": t.last_create_s, "load_start": t.load_start,
                             "load_end": t.load_end, "drain_s": round(drain_s, 1),
                             "cpu_s": t.cpu, "foreign_writes": t.foreign_writes,
                             "pod_work": t.pod_work, "host": t.host, **info})
                console.print(f"  {label:22} {t.done_s:7.2f} s  {pods:,} pods  "
                              f"cluster CPU {cluster_cpu(runs[-1]):.0f} s  "
                              f"load {t.load_start}->{t.load_end}  drain {drain_s:.0f} s  "
                              f"operator writes {info['operator_writes']}")
                path.write_text(json.dumps({"items": n, "task_s": task_s, "batch": k,
                                            "nodes": args.nodes, "pool": POOL,
                                            "renice": args.renice, "runs": runs}, indent=2))
        rss = peak_rss_mb(op.pid)
    finally:
        bench.pids.pop("operator", None)
        op.send_signal(signal.SIGTERM)
        op.wait(30)

    table = Table(title=f"{n:,} tasks of {task_s:g} s: one pod per task vs {k} tasks per "
                        f"pod (min/median/max of {args.rounds} alternating rounds)")
    for col in ("side", "pods", "done s", "tasks/s (median)", "cluster CPU s (median)",
                "operator writes (median)"):
        table.add_column(col, justify="right")
    summary = {}
    for side in ("per-task", "batched"):
        mine = [x for x in runs if x["side"] == side]
        done = stats([x["done_s"] for x in mine])
        cpu = stats([cluster_cpu(x) for x in mine])
        writes = stats([float(x["operator_writes"]) for x in mine])
        summary[side] = {"done_s": done, "cluster_cpu_s": cpu, "operator_writes": writes}
        table.add_row(side, f"{mine[0]['pods']:,}", "/".join(f"{v:.1f}" for v in done),
                      f"{n / done[1]:.1f}", f"{cpu[1]:.0f}", f"{writes[1]:.0f}")
    console.print(table)
    ratio = summary["per-task"]["done_s"][1] / summary["batched"]["done_s"][1]
    console.print(f"batched is {ratio:.2f}x as fast (ratio of medians); operator peak RSS "
                  f"{rss:.0f} MB; results: {path}")
    path.write_text(json.dumps({"items": n, "task_s": task_s, "batch": k, "nodes": args.nodes,
                                "pool": POOL, "renice": args.renice, "runs": runs,
                                "summary": summary, "speedup": round(ratio, 3),
                                "operator_peak_rss_mb": round(rss, 1)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
