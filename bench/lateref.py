"""Late references: how soon a PipelineRun starts once the VirtualCluster it names appears.

Not part of CI. On the local cluster (`.venv/bin/nightshift-localcluster up` first):

    .venv/bin/python bench/lateref.py              # 3 repetitions of each order
    .venv/bin/python bench/lateref.py --reps 5

`kubectl apply -f dir/` creates a directory's objects in file-name order, so a run's
`pipelinerun.yaml` often reaches the API server before the `virtualcluster.yaml` it
names. Both orders, alternating, each timed from the VirtualCluster's create call to
the first sight of the stage's Job (polled every 0.05 s), by an operator this script
starts:
- together: the VirtualCluster, then at once the run (the order that needs no wake-up);
- late: the run first, until its status says WaitingForVirtualCluster, then after a
  pause (2, 5, 8, ... s: anywhere in the run's 30-s look-again) the VirtualCluster.
What the late order costs beyond the other is the wake-up: the operator's watch on
VirtualClusters asks each run that names it for a pass (coalesced, at most one per
NIGHTSHIFT_MIN_PASS_INTERVAL). Results: bench/results/lateref-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobbench import Bench, console, prepared, results_path, stats
from runside import NS_RUN, drain_run, start_operator

from nightshift.api import names
from nightshift.pipelinerun import references

VC, RUN = "later", "waits"


def virtual_cluster() -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.VIRTUALCLUSTER,
            "metadata": {"name": VC, "namespace": NS_RUN},
            "spec": {"nodeClass": {"kwok": {"nodeRegistrationDelay": "5s"}},
                     "pools": [{"name": "workers", "class": "compute", "capacity": "spot",
                                "maxCPU": 4}]}}


def pipelinerun() -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": RUN, "namespace": NS_RUN},
            "spec": {"virtualCluster": VC, "stages": [{
                "name": "s", "pool": "workers", "image": "busybox:1.36",
                "forEach": {"range": {"from": 0, "to": 1}},
                "steps": [{"name": "main", "command": ["true"]}]}]}}


def until(what: str, cond: Any, timeout: float, every: float = 0.05) -> float:
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise RuntimeError(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)
    return time.time()


def one(bench: Bench, order: str, pause: float) -> float:
    """Seconds from the VirtualCluster's create call to the stage's Job."""
    k = bench.kube

    def job() -> bool:
        return bool(k.list("batch/v1", "Job", NS_RUN, label_selector=f"{names.LABEL_RUN}={RUN}"))

    def waiting() -> bool:
        run = k.get(names.API_VERSION, names.PIPELINERUN, RUN, NS_RUN) or {}
        return any(c.get("reason") == references.REASON
                   for c in (run.get("status") or {}).get("conditions") or [])

    if order == "late":
        bench.create(pipelinerun())
        until("the run saying WaitingForVirtualCluster", waiting, 30)
        time.sleep(pause)
        t0 = time.time()
        bench.create(virtual_cluster())
    else:
        t0 = time.time()
        bench.create(virtual_cluster())
        bench.create(pipelinerun())
    return until("the stage's Job", job, 60) - t0


def clean(bench: Bench) -> None:
    k = bench.kube
    drain_run(bench, RUN)
    k.delete(names.API_VERSION, names.VIRTUALCLUSTER, VC, NS_RUN)
    # A VirtualCluster goes once its nodes have (RemovingNodes).
    until("the VirtualCluster's deletion",
          lambda: k.get(names.API_VERSION, names.VIRTUALCLUSTER, VC, NS_RUN) is None, 180, 0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    bench = prepared(0, (NS_RUN,))
    op = start_operator(bench)
    runs: list[dict[str, Any]] = []
    path = results_path("lateref")
    try:
        clean(bench)
        for rep in range(args.reps):
            for order in ("together", "late") if rep % 2 == 0 else ("late", "together"):
                pause = 2.0 + 3 * rep if order == "late" else 0.0
                s = one(bench, order, pause)
                runs.append({"rep": rep + 1, "order": order, "pause_s": pause,
                             "job_after_vc_s": round(s, 3)})
                console.print(f"  rep {rep + 1}/{args.reps} {order:8} the stage's Job "
                              f"{s:6.3f} s after the VirtualCluster's create call")
                clean(bench)
                path.write_text(json.dumps({"argv": sys.argv, "runs": runs}, indent=2))
    finally:
        op.send_signal(signal.SIGTERM)
        op.wait(30)
    for order in ("together", "late"):
        v = [r["job_after_vc_s"] for r in runs if r["order"] == order]
        console.print(f"{order:8}: min/median/max " + "/".join(f"{x:.3f}" for x in stats(v)))
    console.print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
