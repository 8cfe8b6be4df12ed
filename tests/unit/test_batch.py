"""Task batching (stages[].batch): the index<->item mapping, the batched Job and progress
counted in items (run.sh's batch loop in a real /bin/sh: test_batch_runsh.py)."""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.pipelinerun import batch
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.plan import plan
from tests.bad_pipelineruns import stage as plan_stage
from tests.golden_util import check_golden
from tests.unit.test_jobs import render, spec
from tests.unit.test_plan import (
    T0,
    advance,
    complete,
    failed,
    items_for,
    jobs_of,
    make_run,
    observe,
    stage_status,
    with_status,
)

RUN = it.RunRef(name="nightly", namespace="physics", uid="uid-1")

# --- mapping ---------------------------------------------------------------------------


def test_completions_and_positions_cover_every_item_once() -> None:
    for n, k in [(95, 10), (100, 10), (1, 10), (7, 1), (1000, 1000), (1001, 1000)]:
        c = batch.completions(n, k)
        assert c == -(-n // k)
        covered = [p for i in range(c) for p in batch.positions(i, k, n)]
        assert covered == list(range(n)), (n, k)
    # The last batch is short; an index past the end runs nothing.
    assert batch.positions(9, 10, 95) == range(90, 95)
    assert batch.positions(10, 10, 95) == range(95, 95)


def test_items_of_maps_through_a_retry_jobs_indexes() -> None:
    assert batch.items_of([0, 9], 10, 95, None) == {*range(10), *range(90, 95)}
    # A retry Job's positions are the items still to run, re-packed densely.
    mapping = [3, 17, 18, 19, 98, 99]
    assert batch.items_of([0], 4, len(mapping), mapping) == {3, 17, 18, 19}
    assert batch.items_of([1], 4, len(mapping), mapping) == {98, 99}


def test_tolerated_failures_count_whole_batches() -> None:
    assert batch.max_failed_indexes(20, 10, 10) == 2
    assert batch.max_failed_indexes(0, 10, 10) == 0
    assert batch.max_failed_indexes(50, 10, 3) == 3  # never above completions


# --- the batched Job ---------------------------------------------------------------------

BATCHED = {
    "forEach": {"range": {"from": 0, "to": 94, "format": "tile-{:03d}"}},
    "image": "montage/tools:6.0",
    "steps": [{"name": "project", "command": ["mProject"], "args": ["--fast"]},
              {"name": "fit", "command": ["mDiffFit"]}],
    "retries": {"perItem": 2, "permanentExitCodes": [3]},
    "tolerateFailedItems": 20,
    "batch": 10,
}


def test_golden_batched_job() -> None:
    job = render(spec(**BATCHED), completions=batch.completions(95, 10), positions=95)
    check_golden("pipelinerun/job-batched.yaml", job)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_batched_job_fields() -> None:
    job = render(spec(**BATCHED), completions=10, positions=95)
    s = job["spec"]
    assert s["completions"] == 10 and s["parallelism"] == 10
    assert s["maxFailedIndexes"] == 2 and s["backoffLimitPerIndex"] == 2
    pod = s["template"]["spec"]
    for c in [*pod["initContainers"], *pod["containers"]]:
        env = _env(c)
        assert env[names.ENV_BATCH] == "10" and env[names.ENV_BATCH_POSITIONS] == "95"
        assert env[names.ENV_BATCH_RETRIES] == "2" and env[names.ENV_BATCH_PERMANENT] == "3"
        assert env[names.ENV_BATCH_FAILURES] == {"fieldRef": {"fieldPath": (
            "metadata.annotations['batch.kubernetes.io/job-index-failure-count']")}}
        assert c["command"][:2] == ["/bin/sh", f"{names.MOUNT_ITEMS}/{names.RUN_SH_KEY}"]
    assert batch.job_positions(job) == 95


def test_unbatched_job_has_no_batch_env() -> None:
    job = render(spec(**{**BATCHED, "batch": 1, "tolerateFailedItems": 2}), completions=95)
    env = _env(job["spec"]["template"]["spec"]["containers"][0])
    assert not [k for k in env if k.startswith("NIGHTSHIFT_BATCH")]
    assert job["spec"]["maxFailedIndexes"] == 2 and batch.job_positions(job) is None


# --- plan and progress: items, not pods -----------------------------------------------------


def _run(k: int = 10, n: int = 95, **kw: Any) -> dict[str, Any]:
    return make_run([plan_stage("a", forEach={"range": {"from": 0, "to": n - 1}}, batch=k,
                                **kw),
                     plan_stage("b", dependsOn=["a"])])


def test_plan_creates_one_completion_per_batch_and_counts_items() -> None:
    run = _run()
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    assert job["spec"]["completions"] == 10
    assert stage_status(p, "a")["total"] == 95
    run = advance(run, p)
    # Half-way: indexes 0-3 done, 4 pods running.
    mid = with_status(job, completedIndexes="0-3", active=4, ready=4)
    p = plan(observe(run, [mid], items=items_for(run, "a", count=95)))
    a = stage_status(p, "a")
    assert a["succeeded"] == 40 and a["running"] == 4 and a["succeededItems"] == "0-39"
    assert p.status["progress"] == "40/95"
    assert p.patch == [], "parallelism is counted in batches: nothing to correct"
    p = plan(observe(run, [complete(job)], items=items_for(run, "a", "b", count=95)))
    a = stage_status(p, "a")
    assert a["phase"] == "Succeeded" and a["succeeded"] == 95 and a["attempts"][0]["items"] == 95
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["b"]


def test_a_failed_batch_counts_all_its_items_and_the_rerun_repacks_them() -> None:
    run = _run()
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    run = advance(run, p)
    first = failed(job, "0-1,3-8", "2,9")
    p = plan(observe(run, [first], items=items_for(run, "a", count=95)))
    a = stage_status(p, "a")
    assert a["succeeded"] == 80 and a["failed"] == 15 and a["failedItems"] == "20-29,90-94"
    assert a["phase"] == "Failed"
    run = advance(run, p)
    run["spec"]["rerunFailed"] = 1
    p = plan(observe(run, [first], items=items_for(run, "a", count=95)))
    cms = [m for m in p.apply if m["kind"] == "ConfigMap"]
    (retry,) = jobs_of(p)
    want = [*range(20, 30), *range(90, 95)]
    assert cms[0]["data"][names.INDEXES_KEY] == "".join(f"{i}\n" for i in want)
    assert retry["spec"]["completions"] == 2
    assert batch.job_positions(retry) == 15
    # The retry's second batch is items 30.. of its list: 90-94 of the stage's.
    again = failed(retry, "0", "1")
    run = advance(run, p)
    p = plan(observe(run, [first, again], items=items_for(run, "a", count=95)))
    a = stage_status(p, "a")
    assert a["succeeded"] == 90 and a["failedItems"] == "90-94"
    assert a["attempts"][1]["items"] == 15


def test_tolerated_batches_let_dependents_start() -> None:
    run = _run(tolerateFailedItems=20)
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    assert job["spec"]["maxFailedIndexes"] == 2
    run = advance(run, p)
    p = plan(observe(run, [failed(job, "0-1,3-8", "2,9")], items=items_for(run, "a", "b",
                                                                          count=95)))
    assert stage_status(p, "a")["phase"] == "Succeeded"  # 15 counted failures <= 20
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["b"]


def test_stage_view_without_a_recorded_total_reads_the_jobs_positions() -> None:
    job = render(spec(**BATCHED), completions=10, positions=95)
    job = with_status(job, completedIndexes="0-9")
    view = pg.stage_view({0: job}, 0, None, batch=10)
    assert view.total == 95 and view.succeeded == set(range(95))


def test_failure_sample_names_the_batchs_first_item() -> None:
    run = _run()
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    run = advance(run, p)
    samples = {"a": [{"index": 3, "exitCode": 1, "job": job["metadata"]["name"]}]}
    p = plan(observe(run, [failed(job, "0-2,4-9", "3")], items=items_for(run, "a", count=95),
                     samples=samples, now=T0))
    assert stage_status(p, "a")["failureSamples"][0]["index"] == 30
