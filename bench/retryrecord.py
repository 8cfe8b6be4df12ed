"""Retries whose stage record is cut, live: a rerun after the stage's Jobs are gone runs
exactly the failed items (pipelinerun/doneset.py, and the indexes-ConfigMaps map of a
retry whose skip list would pass 64 KiB).

Not part of CI (it needs hundreds to thousands of pods). On the local cluster
(`.venv/bin/nightshift-localcluster up` first):

    .venv/bin/python bench/retryrecord.py                 # 900 items, every 3rd fails
    .venv/bin/python bench/retryrecord.py --items 30000 --every 5

A stage of N KWOK items (no retries per item) where every k-th item fails (the bed's
exit-code stage, hack/kwok/pod-exit-code.yaml) ends Failed; its status record is cut
past 2 KiB. Its Job is then deleted (as a TTL would), the operator restarted (its loop
state gone), and `rerunFailed` bumped. The bench reports the retry Job's completions
against the failures, how its map is kept, and the stage's counts once the retry ends.
Results: bench/results/retryrecord-<time>.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobbench import POOL, Bench, console, prepared, results_path
from runside import NS_RUN, drain_run, start_operator

from nightshift.api import names
from nightshift.pipelinerun import doneset
from nightshift.pipelinerun import items as it
from tests.clusterutil import wait_for

RUN = "retryrec"


def pipelinerun(n: int, every: int) -> dict[str, Any]:
    annotations = {"nightshift.io/kwok-exit-codes": "true",
                   "pod-complete.stage.kwok.x-k8s.io/weight": "0",
                   "nightshift.io/kwok-delay": "200ms",
                   "nightshift.io/kwok-exit-code-every": str(every)}
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": RUN, "namespace": NS_RUN},
            "spec": {"stages": [{
                "name": "a", "pool": POOL, "image": "busybox:1.36",
                "forEach": {"range": {"from": 0, "to": n - 1}},
                "steps": [{"name": "main", "command": ["true"]}],
                "parallelism": min(n, 2000), "retries": {"perItem": 0},
                "podAnnotations": annotations}]}}


def stage_status(bench: Bench) -> dict[str, Any]:
    run = bench.kube.get(names.API_VERSION, names.PIPELINERUN, RUN, NS_RUN) or {}
    stages = (run.get("status") or {}).get("stages") or [{}]
    return dict(stages[0]) | {"runPhase": (run.get("status") or {}).get("phase")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=900)
    ap.add_argument("--every", type=int, default=3, help="every k-th item fails")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    n, k = args.items, args.every
    bad = list(range(k - 1, n, k))
    bench = prepared(args.nodes, [NS_RUN])
    wait = functools.partial(wait_for, interval=1.0, explain=lambda: str(stage_status(bench)))
    drain_run(bench, RUN)
    op = start_operator(bench)
    out: dict[str, Any] = {"items": n, "failing": len(bad)}
    try:
        t0 = time.time()
        bench.kube.apply(pipelinerun(n, k))
        first = wait("the first attempt to fail", lambda: (
            s if (s := stage_status(bench)).get("phase") == "Failed" else None), args.timeout)
        out["first"] = {k_: first.get(k_) for k_ in (
            "succeeded", "failed", "succeededItemsTruncated")} | {"seconds": time.time() - t0}
        done = bench.kube.get("v1", "ConfigMap", doneset.configmap_name(RUN, "a"), NS_RUN)
        out["doneSetChars"] = len(((done or {}).get("data") or {}).get(doneset.KEY, ""))
        # The first Job goes (a TTL), and so does the operator's memory of the run.
        job = it.job_name(RUN, "a", 0)
        bench.kube.delete("batch/v1", "Job", job, NS_RUN, propagation="Background")
        wait("the Job to go", lambda: bench.kube.get(
            "batch/v1", "Job", job, NS_RUN) is None, 120)
        op.terminate()
        op.wait(30)
        op = start_operator(bench)
        bench.kube.merge_patch(names.API_VERSION, names.PIPELINERUN, RUN, NS_RUN,
                               {"spec": {"rerunFailed": 1}})
        retry_name = it.job_name(RUN, "a", 1)
        retry = wait("the retry Job", lambda: bench.kube.get(
            "batch/v1", "Job", retry_name, NS_RUN), 120)
        ann = retry["metadata"].get("annotations") or {}
        out["retry"] = {"completions": retry["spec"]["completions"],
                        "map": ("skip-items annotation" if names.ANNOTATION_SKIP_ITEMS in ann
                                else "indexes ConfigMaps")}
        last = wait("the retry to end", lambda: (
            s if (s := stage_status(bench)).get("phase") in ("Succeeded", "Failed")
            and s.get("attempt") == 1 else None), args.timeout)
        out["after"] = {k_: last.get(k_) for k_ in ("phase", "succeeded", "failed", "total")}
    finally:
        op.terminate()
        op.wait(30)
    path = results_path("retryrecord")
    path.write_text(json.dumps(out, indent=2) + "\n")
    exact = out["retry"]["completions"] == len(bad)
    console.print(f"{n} items, {len(bad)} failing; record cut: "
                  f"{out['first']['succeededItemsTruncated']}; done set "
                  f"{out['doneSetChars']:,} chars; retry ran {out['retry']['completions']} "
                  f"({out['retry']['map']}): {'exact' if exact else 'NOT exact'}; after it: "
                  f"{out['after']}")
    console.print(f"results: {path}")
    drain_run(bench, RUN)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
