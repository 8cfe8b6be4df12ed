"""The run's status stays a few KB at 100,000 items, even with scattered failures."""

from __future__ import annotations

import json
from typing import Any

from nightshift.api import ranges
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import ItemsInfo
from nightshift.pipelinerun.samples import OWN_LINE_LIMIT
from tests.bad_pipelineruns import stage
from tests.unit.test_plan import T0, advance, jobs_of, observe, with_status

N = 100_000
TOLERATE = 10_000


def _run() -> dict[str, Any]:
    big = {"range": {"from": 0, "to": N - 1, "format": "night-{:06d}"}}
    return {
        "apiVersion": "nightshift.io/v1alpha1", "kind": "PipelineRun",
        "metadata": {"name": "nightly", "namespace": "physics", "uid": "u1", "generation": 1},
        "spec": {"stages": [
            stage("split", forEach=big, tolerateFailedItems=TOLERATE),
            stage("invert", forEach=big, tolerateFailedItems=TOLERATE, dependsOn=["split"]),
            stage("concat", dependsOn=["invert"]),
        ]},
    }


def _items(*stages: str) -> dict[str, ItemsInfo]:
    return {s: ItemsInfo(N, tuple(it.items_configmap_name("nightly", s, k) for k in range(3)))
            for s in stages}


def worst_case_status() -> dict[str, Any]:
    """Stage 1 done with 9,999 failures scattered every 10th item (no two adjacent, so
    no range compresses), stage 2 halfway with as many, each with failure samples."""
    run = _run()
    p = plan(observe(run, items=_items("split", "invert")))
    (job,) = jobs_of(p)
    failed = list(range(0, 99_990, 10))
    done = ranges.compress(sorted(set(range(N)) - set(failed)))
    finished = with_status(job, completedIndexes=done, failedIndexes=ranges.compress(failed),
                           succeeded=N - len(failed), failed=len(failed) * 4,
                           conditions=[{"type": "Complete", "status": "True",
                                        "lastTransitionTime": "2025-03-01T13:00:00Z"}])
    # Each message as long as a sample keeps one (the runner's own line, whole).
    samples = [{"index": i, "exitCode": 3, "reason": "Error",
                "message": "x" * OWN_LINE_LIMIT} for i in failed[:5]]
    run = advance(run, p)
    p = plan(observe(run, [finished], items=_items("split", "invert"),
                     samples={"split": samples}))
    (job2,) = jobs_of(p)
    half = list(range(0, N // 2, 10))
    running = with_status(job2, completedIndexes=ranges.compress(
        sorted(set(range(N // 2)) - set(half))), failedIndexes=ranges.compress(half),
        succeeded=N // 2 - len(half), failed=len(half) * 4, active=5000, ready=5000)
    run = advance(run, p)
    p = plan(observe(run, [finished, running], items=_items("split", "invert"),
                     samples={"split": samples, "invert": samples}, now=T0))
    return p.status


def test_status_stays_under_16_kb_at_100k_items() -> None:
    status = worst_case_status()
    size = len(json.dumps(status))
    assert size <= 16 * 1024, f"status is {size} bytes"
    split = next(s for s in status["stages"] if s["name"] == "split")
    # Counts stay exact even where the list of failed items is cut short.
    assert split["failed"] == 9_999 and split["succeeded"] == N - 9_999, split


if __name__ == "__main__":
    print(len(json.dumps(worst_case_status())), "bytes")
