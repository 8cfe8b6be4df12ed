"""Fan-out pairs run at the same time on twin clusters, each on its own CPUs (not part of CI).

bench/fanout.py runs a pair's two sides one after the other, so a change in the host's
speed between them (a hypervisor's steal, a neighbour) lands on one side only: on this
2-core VM its A/A sets, both sides the same pods, spread from 0.87 to 1.09, wider than
the 5 % the fan-out goal asks to resolve. Here the two sides of a pair run at once, on
two local clusters each pinned to its own CPUs, one core each by default (every part,
the bench's poller and the operator under `taskset`), so whatever slows the host slows
both; the sides swap twins from pair to pair, so a faster core favours neither. Each side
has the other twin's work as "other" in its CPU split, not its own.

    .venv/bin/nightshift-localcluster down              # the usual cluster: cores free
    .venv/bin/python bench/twin.py --up --sizes 3000 --baseline full   # A/A: the bed
    .venv/bin/python bench/twin.py --sizes 3000 10000                  # bare / run
    .venv/bin/python bench/twin.py --sizes 10000 --variants bare +perIndex  # two Jobs
    .venv/bin/python bench/twin.py --down
    # 4+ cores: two per twin, for 10,000-item sides, which ran away on one (AJ, AN, AO)
    .venv/bin/python bench/twin.py --up --cores-per-twin 2 --sizes 10000 --down

`--up` starts (or restarts) the twins in .localcluster-twin-0 and -1 (no real node, no
MPI Operator, no Karpenter: the bench brings its own fake nodes, and Karpenter was the
third busiest part of each twin though no pod waited for a node);
`--down` stops them after the sizes. Sides are timed as in bench/fanout.py (create call
to the Job's Complete or the run's Succeeded, polled every 0.25 s); each pair's ratio is
bare / PipelineRun, the median over pairs is the speed ratio. `--variants A B` pairs two
Jobs of bench/ablation.py's variants instead (ratio A / B): the ablation, resolved.
Results go to bench/results/twin-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jobbench
import runside
from ablation import VARIANTS, variant_job
from freshcluster import localcluster
from jobbench import ROOT, Timed, console, part_pids, prepared, results_path, run_job, stats
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from runside import NS_JOB, NS_RUN, drain_run, peak_rss_mb, run_pipelinerun, start_operator
from watchstats import delta, pod_counters, steady, unsteady_because

from nightshift.api import ranges

CORES = (0, 1)  # the twins' numbers; "core" in results and output is the twin's number
# Variants a twin can run as they are (padding needs a dry run, affinity a VirtualCluster).
TWIN_VARIANTS = tuple(v for v in VARIANTS if v not in ("bare+padding", "bare+fields",
                                                        "full+affinity"))


def twin_dir(core: int) -> Path:
    return ROOT / f".localcluster-twin-{core}"


def twin_env(core: int) -> dict[str, str]:
    """The environment that points the local cluster's tools at the twin on `core`."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return env | {"NIGHTSHIFT_LOCALCLUSTER_DIR": str(twin_dir(core))}


def twin_cpus(per_twin: int, allowed: set[int] | None = None) -> dict[int, str]:
    """The CPU list (`taskset -c`'s form) of each twin: the first `per_twin` allowed CPUs
    for twin 0, the next for twin 1. On a 2-core machine, one each; a 10,000-item side
    needs more than one (docs/performance.md, sets AJ, AN and AO)."""
    cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if per_twin < 1 or len(cpus) < per_twin * len(CORES):
        raise ValueError(f"--cores-per-twin {per_twin}: the twins need "
                         f"{max(per_twin, 1) * len(CORES)} CPUs and this process may use "
                         f"{len(cpus)} ({','.join(map(str, cpus))}); give at most "
                         f"{len(cpus) // len(CORES)}")
    return {t: ",".join(str(c) for c in cpus[t * per_twin:(t + 1) * per_twin]) for t in CORES}


def cluster(core: int, cpus: str, *args: str) -> None:
    """`nightshift-localcluster ARGS` for twin `core`, pinned to its CPUs: every part it
    starts inherits the affinity (and Go sizes GOMAXPROCS to it)."""
    localcluster(*args, env={"NIGHTSHIFT_LOCALCLUSTER_DIR": str(twin_dir(core))},
                 prefix=("taskset", "-c", cpus))


def same_cpus(a: str, b: str) -> bool:
    """Whether two CPU lists (taskset's "0,1" or /proc's "0-1") name the same CPUs: the
    kernel's list format is a Job's index ranges'."""
    return ranges.parse(a) == ranges.parse(b)


def pinned(core: int) -> dict[str, str]:
    """Each part of the twin on `core` and the cores it may run on (as /proc says)."""
    out = {}
    for name, pid in part_pids(twin_dir(core)).items():
        status = Path(f"/proc/{pid}/status").read_text()
        out[name] = next(line.split()[1] for line in status.splitlines()
                         if line.startswith("Cpus_allowed_list"))
    return out


# -- one side, in a process pinned to its twin's core ----------------------------------

def api_pod_counters(bench: jobbench.Bench) -> dict[str, float]:
    """The twin's API server's pod-watch counters (watchstats.py), read with kubectl."""
    r = subprocess.run([str(bench.layout.kubectl), f"--kubeconfig={bench.layout.kubeconfig}",
                        "get", "--raw", "/metrics"], capture_output=True, text=True,
                       check=True)
    return pod_counters(r.stdout)


def side(args: argparse.Namespace) -> int:
    """Prepare, say READY, wait for GO on stdin, run, say RESULT <json>. Everything else
    this process prints goes to stderr; the protocol has stdout to itself."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def say(line: str) -> None:
        proto.write(line + "\n")

    def report_progress(label: str, total: int) -> Any:
        last = [-1]

        def update(done: int) -> None:
            if done != last[0]:
                last[0] = done
                say(f"PROGRESS {done}")
        return contextlib.nullcontext(update)

    # The runs' progress bars become protocol lines the parent draws for both sides.
    jobbench.progress = report_progress
    runside.progress = report_progress  # type: ignore[attr-defined]
    n, label = args.items, f"pair {args.pair} {args.side} on core {args.core}"
    bench = prepared(args.nodes, (NS_JOB, NS_RUN))
    bench.drain(NS_JOB)
    drain_run(bench)
    timeout = max(600.0, n / 2)
    # The stage's parallelism, on both sides alike (None: bench/jobvariants.stage's).
    cap: dict[str, Any] = {"parallelism": args.parallelism} if args.parallelism else {}
    op = None
    if args.side == "run":
        op = start_operator(bench)
        bench.pids["operator"] = op.pid  # its CPU in the side's split, not in "other"

        def timed() -> tuple[Timed, dict[str, Any]]:
            return run_pipelinerun(bench, n, args.task_seconds, label, timeout, **cap)
    else:
        job, cms = variant_job(args.side, n, args.task_seconds, NS_JOB, **cap)

        def timed() -> tuple[Timed, dict[str, Any]]:
            return run_job(bench, job, cms, label, timeout), {}
    bench.quiet()
    say("READY")
    if sys.stdin.readline().strip() != "GO":
        return 1
    before = api_pod_counters(bench)
    try:
        t, extra = timed()
    finally:
        rss = None
        if op is not None:
            rss = round(peak_rss_mb(op.pid), 1)
            op.send_signal(signal.SIGTERM)
            op.wait(30)
    say("RESULT " + json.dumps({
        "done_s": t.done_s, "last_create_s": t.last_create_s, "cpu_s": t.cpu,
        "pod_work": t.pod_work, "host": t.host, "operator_peak_rss_mb": rss,
        "load_start": t.load_start, "load_end": t.load_end,
        "watch": delta(before, api_pod_counters(bench)), **extra}))
    return 0


# -- the parent: both sides of a pair at once ------------------------------------------

class Side:
    def __init__(self, core: int, role: str, name: str, pair: int, args: argparse.Namespace,
                 n: int, log: IO[str]) -> None:
        self.cpus = args.cpus[core]
        argv = ["taskset", "-c", self.cpus, sys.executable, str(Path(__file__).resolve()),
                "--side", name, "--core", str(core), "--pair", str(pair), "--items", str(n),
                "--task-seconds", str(args.task_seconds), "--nodes", str(args.nodes)]
        if args.parallelism:
            argv += ["--parallelism", str(args.parallelism)]
        self.core, self.role, self.name, self.done = core, role, name, 0
        self.result: dict[str, Any] | None = None
        self.ready = threading.Event()
        self.proc = subprocess.Popen(argv, env=twin_env(core), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "READY":
                self.ready.set()
            elif word == "PROGRESS":
                self.done = int(rest)
            elif word == "RESULT":
                self.result = json.loads(rest)
        self.ready.set()  # ended: never leave the parent waiting

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("GO\n")
        self.proc.stdin.flush()


def one_pair(args: argparse.Namespace, n: int, pair: int, log: IO[str],
             names: tuple[str, str]) -> dict[str, Any]:
    """`names`: the first side (a Job variant) and the second (a variant, or "run", the
    PipelineRun); pair 1 has the first on core 0, then they swap."""
    roles = ("first", "second") if pair % 2 == 1 else ("second", "first")
    named = dict(zip(("first", "second"), names, strict=True))
    sides = [Side(core, role, named[role], pair, args, n, log)
             for core, role in zip(CORES, roles, strict=True)]
    for s in sides:
        s.ready.wait()
    if any(s.proc.poll() is not None for s in sides):
        for s in sides:
            s.proc.kill()
        raise RuntimeError(f"pair {pair}: a side ended before the start; see its log")
    for s in sides:
        s.go()
    with Progress(TextColumn("  {task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        tasks = {s.role: bar.add_task(f"pair {pair} {s.name} (core {s.core})", total=n)
                 for s in sides}
        while any(s.proc.poll() is None for s in sides):
            for s in sides:
                bar.update(tasks[s.role], completed=s.done)
            time.sleep(1)
    for s in sides:
        s.reader.join(10)
        if s.proc.returncode != 0 or s.result is None:
            raise RuntimeError(f"pair {pair}: the {s.name} side on core {s.core} failed "
                               f"(rc {s.proc.returncode}); see {log.name}")
    by_role = {s.role: s.result | {"side": s.name, "core": s.core, "cpus": s.cpus}
               for s in sides if s.result}
    first, second = by_role["first"], by_role["second"]
    ratio = round(first["done_s"] / second["done_s"], 3)
    wf, ws = first.get("watch", {}), second.get("watch", {})
    calm = steady(wf, ws)
    console.print(f"  pair {pair}: {first['side']} {first['done_s']:.1f} s ({_on(first)}), "
                  f"{second['side']} {second['done_s']:.1f} s ({_on(second)}): ratio {ratio}")
    if calm is not None:
        console.print(f"    pod watch events per stored change {wf['events_per_change']} / "
                      f"{ws['events_per_change']}, watchers cut {wf['watchers_cut']} / "
                      f"{ws['watchers_cut']}: "
                      + ("steady" if calm else f"NOT steady ({unsteady_because(wf, ws)})"))
    return {"pair": pair, "ratio": ratio, "steady": calm, **by_role}


def _on(side: dict[str, Any]) -> str:
    cpus = str(side["cpus"])
    return f"core {cpus}" if cpus.isdigit() else f"twin {side['core']}, CPUs {cpus}"


def summary(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pairs' ratios, their median (the goal's measure), and the two figures the
    core swap gives: `balanced_ratio`, the geometric mean of the first-side-on-core-0
    and the first-side-on-core-1 pairs' geometric means (a faster core cancels out),
    and `core_effect`, a side's speed on core 0 over its speed on core 1 (1.0: the
    cores are alike).
    Both need a pair each way; None otherwise."""
    ratios = [float(p["ratio"]) for p in pairs]
    each = {core: [float(p["ratio"]) for p in pairs if p["first"]["core"] == core]
            for core in CORES}
    calm = [float(p["ratio"]) for p in pairs if p.get("steady")]
    out: dict[str, Any] = {"pair_ratio": ratios, "speed_ratio": round(stats(ratios)[1], 3),
                           "ratio_range": [min(ratios), max(ratios)],
                           "steady_pairs": len(calm),
                           "steady_speed_ratio": round(stats(calm)[1], 3) if calm else None,
                           "balanced_ratio": None, "core_effect": None}
    if all(each.values()):
        gm = {core: statistics.geometric_mean(v) for core, v in each.items()}
        out["balanced_ratio"] = round(math.sqrt(gm[0] * gm[1]), 3)
        # A ratio is first / second time: with core 0 k times slower, the pairs with the
        # first side on core 0 read k times the true ratio and the others 1/k times it.
        out["core_effect"] = round(math.sqrt(gm[1] / gm[0]), 3)
    return out


def _fig(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+",
                    help="items per side (default 3000; with only --down, none: just stop)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--task-seconds", type=float, default=1.0)
    ap.add_argument("--nodes", type=int, default=20, help="KWOK nodes in each twin")
    ap.add_argument("--parallelism", type=int,
                    help="the stage's parallelism on both sides (default: the items, at "
                         "most 5,000): a cap keeps a 10,000-item side within one core")
    ap.add_argument("--baseline", choices=("bare", "full"), default="bare",
                    help="the Job beside the PipelineRun: the bare Job (the goal's measure) "
                         "or the run's own Job unchanged (A/A: the bed's own spread)")
    ap.add_argument("--up", action="store_true",
                    help="start the twins first (restarted if running), one per core")
    ap.add_argument("--down", action="store_true", help="stop the twins at the end")
    ap.add_argument("--cores-per-twin", type=int, default=1,
                    help="CPUs for each twin (default 1; a 10,000-item side ran away on one "
                         "core of a 2-core VM): give the same number with --up and after")
    ap.add_argument("--variants", nargs=2, metavar=("A", "B"),
                    help="two Jobs instead of the Job and the run: bench/ablation.py's "
                         f"variants ({', '.join(TWIN_VARIANTS)}); ratio A / B")
    ap.add_argument("--side", choices=(*TWIN_VARIANTS, "run"), help=argparse.SUPPRESS)
    ap.add_argument("--core", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--pair", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--items", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return side(args)
    if args.sizes is None:
        args.sizes = [] if args.down and not args.up else [3000]
    if args.pairs < 1:
        ap.error(f"--pairs {args.pairs}: a size needs at least one pair")
    if args.parallelism is not None and args.parallelism < 1:
        ap.error(f"--parallelism {args.parallelism}: give at least 1, or leave it out")
    names = tuple(args.variants or (args.baseline, "run"))
    for name in names:
        if name not in (*TWIN_VARIANTS, "run"):
            ap.error(f"--variants: {name!r} is not a variant here; use one of "
                     f"{', '.join(TWIN_VARIANTS)} (bench/ablation.py --list)")
    try:
        args.cpus = twin_cpus(args.cores_per_twin)
    except ValueError as e:
        ap.error(str(e))
    if args.up:
        for core in CORES:
            cluster(core, args.cpus[core], "down")
            cluster(core, args.cpus[core], "up", "--no-real-node", "--no-mpi-operator",
                    "--no-karpenter")
    if not args.sizes:
        for core in CORES:
            cluster(core, args.cpus[core], "down")
        return 0
    for core in CORES:
        if not (twin_dir(core) / "state.json").is_file():
            ap.error(f"twin {core} is not running: start both with --up")
    pins = {core: pinned(core) for core in CORES}
    for core, parts in pins.items():
        # Twins started with another --cores-per-twin would run the sides on other CPUs
        # than their clusters: the pair would measure the pinning, not the pods.
        wrong = {name: got for name, got in parts.items() if not same_cpus(got, args.cpus[core])}
        if wrong:
            ap.error(f"twin {core}'s parts run on CPUs {wrong}, not {args.cpus[core]}: "
                     f"start the twins with --up --cores-per-twin {args.cores_per_twin}")
    console.print(f"twins pinned: {pins}")
    path = results_path("twin")
    log_path = path.with_suffix(".log")
    results: list[dict[str, Any]] = []
    with log_path.open("w") as log:
        for n in args.sizes:
            cap = f", parallelism {args.parallelism:,}" if args.parallelism else ""
            console.print(f"[bold]{n:,} items of {args.task_seconds:g} s[/]{cap}, {names[0]} "
                          f"and {names[1]} at once, {args.pairs} pairs")
            pairs: list[dict[str, Any]] = []
            for p in range(1, args.pairs + 1):
                pairs.append(one_pair(args, n, p, log, names))
                # Written after each pair: a set stopped early keeps the pairs it ran.
                r = {"items": n, "sides": names, "pairs": pairs, **summary(pairs)}
                path.write_text(json.dumps({"results": [*results, r], "pins": pins,
                                            "nodes": args.nodes,
                                            "parallelism": args.parallelism,
                                            "cpus": args.cpus}, indent=2))
            results.append(r)
            console.print(f"  {n:,} items: speed ratio {r['speed_ratio']:.3f} (pairs "
                          f"{r['pair_ratio']}); balanced over the cores "
                          f"{_fig(r['balanced_ratio'])}, core 0 / core 1 "
                          f"{_fig(r['core_effect'])}; steady pairs {r['steady_pairs']}, "
                          f"their median {_fig(r['steady_speed_ratio'])}")
    if args.down:
        for core in CORES:
            cluster(core, args.cpus[core], "down")
    console.print(f"results: {path} (the sides' output: {log_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
