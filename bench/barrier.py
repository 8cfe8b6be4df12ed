"""Stage barriers: how soon a PipelineRun starts its next stage, and says Succeeded, after
a stage's Job finishes; against a script that chains the same bare Jobs itself.

Not part of CI. On the local cluster (`.venv/bin/nightshift-localcluster up` first):

    .venv/bin/python bench/barrier.py                         # 5 stages x 100 items, 3 reps
    .venv/bin/python bench/barrier.py --stages 10 --items 20 --reps 5

Sides, alternating (the order flips every repetition), the namespace drained between
runs (bench/jobbench.py):
- script: the stages' bare Jobs (bench/jobvariants.py), each created by this script as
  soon as its watch sees the previous one finished: a person's script at its best;
- pipelinerun: a PipelineRun whose stages form a chain (`dependsOn`), reconciled by an
  operator this script starts.
Watches on the side's Jobs and on the PipelineRun stamp, on this process's clock, when
each Job appeared and when it first showed a condition that ends it
(`SuccessCriteriaMet`, `Complete` or `Failed`: progress.ENDING, the ones the operator's
pass counts), and when the run's phase became Succeeded. Per run:
- barrier k: Job k+1 appeared - Job k finished, for every stage but the last;
- end (pipelinerun): run Succeeded - last Job finished;
- done: first create call to the last Job finished (script) or to Succeeded (run).
Results: bench/results/barrier-<time>.json and a table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import urllib3
from argo import pipelinerun
from jobbench import Bench, console, prepared, results_path, stats
from jobvariants import only, rendered_job
from kubernetes import client, config, watch
from rich.table import Table
from runside import NS_JOB, NS_RUN, drain_run, start_operator

from nightshift.api import names
from nightshift.pipelinerun.progress import ended


class Stamps:
    """Event times from watches on one namespace's Jobs and PipelineRuns."""

    def __init__(self, bench: Bench, namespace: str) -> None:
        self.api = config.new_client_from_config(str(bench.layout.kubeconfig))
        self.namespace = namespace
        self.added: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.succeeded: float | None = None
        self.changed = threading.Condition()
        self._watches: list[watch.Watch] = []
        self._threads: list[threading.Thread] = []
        self._stopping = False

    def __enter__(self) -> Stamps:
        batch = client.BatchV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        self._start(self._on_job, batch.list_namespaced_job, self.namespace)
        self._start(self._on_run, custom.list_namespaced_custom_object, names.GROUP,
                    names.VERSION, self.namespace, names.PIPELINERUNS)
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping = True
        for w in self._watches:
            w.stop()
        # A watch stops only at its next event: closing its connection ends it now.
        self.api.rest_client.pool_manager.clear()
        for t in self._threads:
            t.join(5)

    def _start(self, on: Any, fn: Any, *args: Any) -> None:
        w = watch.Watch()
        ready = threading.Event()
        self._watches.append(w)

        def loop() -> None:
            # No resourceVersion: the watch starts with the namespace's objects as ADDED
            # events, none here (the namespace is drained), then every change.
            ready.set()
            try:
                for ev in w.stream(fn, *args, timeout_seconds=3600):
                    obj = ev["object"]
                    body = (obj if isinstance(obj, dict)
                            else self.api.sanitize_for_serialization(obj))
                    on(ev["type"], body, time.time())
            except (urllib3.exceptions.HTTPError, OSError, ValueError):
                if not self._stopping:
                    raise
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        self._threads.append(t)
        ready.wait(5)
        time.sleep(0.5)  # the watch request is in flight before the first create

    def _on_job(self, type_: str, job: dict[str, Any], at: float) -> None:
        name = job["metadata"]["name"]
        with self.changed:
            if type_ == "ADDED":
                self.added.setdefault(name, at)
            if ended(job):
                self.finished.setdefault(name, at)
            self.changed.notify_all()

    def _on_run(self, _type: str, run: dict[str, Any], at: float) -> None:
        with self.changed:
            if (run.get("status") or {}).get("phase") == "Succeeded" and self.succeeded is None:
                self.succeeded = at
            self.changed.notify_all()

    def wait(self, what: str, cond: Any, timeout: float) -> None:
        with self.changed:
            if not self.changed.wait_for(cond, timeout):
                raise RuntimeError(f"not seen within {timeout:.0f} s: {what}")


def job_names(stamps: Stamps) -> list[str]:
    """The side's Jobs in the order they appeared."""
    return sorted(stamps.added, key=stamps.added.__getitem__)


def script_side(bench: Bench, stages: int, n: int, task_s: float, timeout: float
                ) -> dict[str, Any]:
    with Stamps(bench, NS_JOB) as stamps:
        t0 = time.time()
        for i in range(stages):
            job, _ = rendered_job(n, NS_JOB, task_s)
            job = only(job, [])
            name = job["metadata"]["name"] = f"fan-s{i}"
            bench.create(job)
            stamps.wait(f"Job {name} finished", lambda name=name: name in stamps.finished,
                        timeout)
        order = job_names(stamps)
        end = stamps.finished[order[-1]]
    return summary(stamps, order, t0, end)


def run_side(bench: Bench, stages: int, n: int, task_s: float, timeout: float
             ) -> dict[str, Any]:
    op = start_operator(bench)
    try:
        with Stamps(bench, NS_RUN) as stamps:
            t0 = time.time()
            bench.create(pipelinerun(stages, n, task_s))
            stamps.wait("the run Succeeded", lambda: stamps.succeeded is not None, timeout)
            order = job_names(stamps)
            assert stamps.succeeded is not None  # waited for above
            out = summary(stamps, order, t0, stamps.succeeded)
            out["end_s"] = round(stamps.succeeded - stamps.finished[order[-1]], 3)
    finally:
        op.send_signal(signal.SIGTERM)
        op.wait(30)
    return out


def summary(stamps: Stamps, order: list[str], t0: float, end: float) -> dict[str, Any]:
    barriers = [round(stamps.added[b] - stamps.finished[a], 3)
                for a, b in itertools.pairwise(order)]
    return {"jobs": order, "done_s": round(end - t0, 2), "barriers_s": barriers,
            "first_job_s": round(stamps.added[order[0]] - t0, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", type=int, default=5)
    ap.add_argument("--items", type=int, default=100, help="items per stage")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--task-seconds", type=float, default=1.0)
    ap.add_argument("--label", default="", help="a note stored with the results")
    args = ap.parse_args()
    if args.stages < 2:
        ap.error("--stages must be at least 2: a barrier is between two stages")
    bench = prepared(args.nodes, (NS_JOB, NS_RUN))
    timeout = max(300.0, args.items * args.task_seconds)
    bench.drain(NS_JOB)
    drain_run(bench)
    runs: list[dict[str, Any]] = []
    path = results_path("barrier")
    for rep in range(args.reps):
        order = ("script", "pipelinerun") if rep % 2 == 0 else ("pipelinerun", "script")
        for side in order:
            if side == "script":
                r = script_side(bench, args.stages, args.items, args.task_seconds, timeout)
                drain = bench.drain(NS_JOB)
            else:
                r = run_side(bench, args.stages, args.items, args.task_seconds, timeout)
                drain = drain_run(bench)
            r.update(side=side, rep=rep + 1, drain_s=round(drain, 1))
            runs.append(r)
            console.print(f"  rep {rep + 1}/{args.reps} {side:11} done {r['done_s']:6.1f} s  "
                          f"barriers {r['barriers_s']} s"
                          + (f"  end {r['end_s']} s" if "end_s" in r else ""))
            path.write_text(json.dumps({"argv": sys.argv, "label": args.label,
                                        "stages": args.stages, "items": args.items,
                                        "runs": runs}, indent=2))
    t = Table(title=f"{args.stages} stages x {args.items} items: seconds, min/median/max")
    for col in ("side", "runs", "done", "barrier (every barrier of every run)", "end"):
        t.add_column(col, justify="right")
    for side in ("script", "pipelinerun"):
        mine = [r for r in runs if r["side"] == side]
        bars = [b for r in mine for b in r["barriers_s"]]
        ends = [r["end_s"] for r in mine if "end_s" in r]

        def mmm(v: list[float], fmt: str = "{:.3f}") -> str:
            return "/".join(fmt.format(x) for x in stats(v)) if v else "-"
        t.add_row(side, str(len(mine)), mmm([r["done_s"] for r in mine], "{:.1f}"),
                  mmm(bars), mmm(ends))
    console.print(t)
    console.print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
