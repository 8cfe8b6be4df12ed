"""Finished is final; a lost Job is replaced by one that runs only what is not recorded.

The run's status is the record: a Succeeded, Failed or Cancelled run never creates a
Job again when its Jobs disappear (by hand, a TTL, a clean-up of finished Jobs), and a
stage Job lost mid-run is replaced by one that runs only the items the status does not
already hold as succeeded (issue 14).
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from nightshift.api import names, ranges
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import lost
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import Observed, Plan
from tests.bad_pipelineruns import stage
from tests.unit.test_plan import (
    T0,
    advance,
    complete,
    condition,
    failed,
    items_for,
    jobs_of,
    make_run,
    observe,
    stage_status,
    start_a,
    with_status,
)


def _seen(p: Plan, job: dict[str, Any], **status: Any) -> dict[str, Any]:
    """`job` as the API server returns it: with a uid, a creation time and `status`."""
    out = with_status(job, **status)
    out["metadata"]["uid"] = "uid-" + job["metadata"]["name"]
    return out


def _succeeded_run() -> tuple[dict[str, Any], list[dict[str, Any]], Plan]:
    """Run `nightly` with stages a (100 items) then b (1 item), both done."""
    run = make_run()
    p, job_a = start_a(run)
    run = advance(run, p)
    ja = _seen(p, job_a, active=100)
    p = plan(observe(run, [ja], items=items_for(run, "a")))
    run = advance(run, p)
    ja = complete(ja)
    items = {**items_for(run, "a"), **items_for(run, "b", count=1)}
    p = plan(observe(run, [ja], items=items))
    (job_b,) = jobs_of(p)
    run = advance(run, p)
    jb = _seen(p, job_b, active=1)
    p = plan(observe(run, [ja, jb], items=items))
    run = advance(run, p)
    jb = complete(jb)
    p = plan(observe(run, [ja, jb], items=items))
    assert p.status["phase"] == "Succeeded"
    return advance(run, p), [ja, jb], p


def test_deleted_jobs_of_a_succeeded_run_are_not_created_again() -> None:
    run, _, before = _succeeded_run()
    items = {**items_for(run, "a"), **items_for(run, "b", count=1)}
    for later in (1, 2):
        p = plan(observe(run, [], items=items, now=T0 + timedelta(hours=later)))
        assert p.apply == [] and p.patch == [] and p.resolve_items == []
        assert p.status["phase"] == "Succeeded"
        assert p.status["progress"] == "101/101"
        assert p.status["stages"] == before.status["stages"], "the record is kept as it was"
        assert condition(p, "Ready")["status"] == "True"
        assert p.events == []
        run = advance(run, p)


def test_a_failed_run_whose_jobs_are_gone_stays_failed_with_its_record() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    bad = failed(job, "0-2,4-16,20-99", "3,17-19")
    bad["metadata"]["uid"] = "uid-a"
    p = plan(observe(run, [bad], items=items_for(run, "a", "b")))
    assert p.status["phase"] == "Failed"
    b_before = stage_status(p, "b")
    run = advance(run, p)
    p = plan(observe(run, [], items=items_for(run, "a", "b"), now=T0 + timedelta(hours=3)))
    assert p.apply == [] and p.resolve_items == []
    a = stage_status(p, "a")
    assert (a["phase"], a["failed"], a["succeeded"], a["failedItems"]) == (
        "Failed", 4, 96, "3,17-19")
    assert p.status["phase"] == "Failed" and condition(p, "Failed")["status"] == "True"
    assert stage_status(p, "b") == b_before and b_before["phase"] == "Pending"


def test_a_cancelled_run_whose_job_is_gone_creates_nothing() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    ja = _seen(p, job, active=5, completedIndexes="0-9")
    p = plan(observe(run, [ja], items=items_for(run, "a")))
    run = advance(run, p)
    run["spec"]["cancel"] = True
    p = plan(observe(run, [ja], items=items_for(run, "a")))
    assert p.status["phase"] == "Cancelled"
    run = advance(run, p)
    p = plan(observe(run, [], items=items_for(run, "a", "b")))
    assert p.apply == [] and p.patch == [] and p.resolve_items == []
    assert p.status["phase"] == "Cancelled"
    assert stage_status(p, "a")["succeeded"] == 10


def test_a_finished_stage_whose_job_was_cleaned_up_is_not_run_again() -> None:
    """A TTL removes stage a's finished Job while stage b runs."""
    run = make_run()
    p, job_a = start_a(run)
    run = advance(run, p)
    ja = complete(_seen(p, job_a))
    items = {**items_for(run, "a"), **items_for(run, "b", count=1)}
    p = plan(observe(run, [ja], items=items))
    (job_b,) = jobs_of(p)
    run = advance(run, p)
    jb = _seen(p, job_b, active=1)
    p = plan(observe(run, [ja, jb], items=items))
    run = advance(run, p)
    p = plan(observe(run, [jb], items=items))
    assert p.apply == [], "stage a is recorded as succeeded: nothing of it runs again"
    assert stage_status(p, "a")["phase"] == "Succeeded"
    assert stage_status(p, "a")["succeeded"] == 100
    assert p.status["phase"] == "Running"
    run = advance(run, p)
    p = plan(observe(run, [complete(jb)], items=items))
    assert p.status["phase"] == "Succeeded" and p.status["progress"] == "101/101"


def test_the_status_records_which_items_succeeded() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    p = plan(observe(run, [_seen(p, job, active=10, completedIndexes="0-39,50-59")],
                     items=items_for(run, "a")))
    a = stage_status(p, "a")
    assert a["succeededItems"] == "0-39,50-59" and a["succeeded"] == 50
    assert a["attempts"][0]["jobUID"] == "uid-" + job["metadata"]["name"]


def test_the_succeeded_record_stays_small_and_never_claims_too_much() -> None:
    done = [i for i in range(100_000) if i % 7]  # 14,285 gaps: no short text holds it
    text, cut = pg.record_ranges(done, 2048)
    assert cut and len(text) <= 2048
    kept = ranges.parse(text)
    assert set(kept) <= set(done), "a record may hold fewer items, never more"
    exact, cut = pg.record_ranges(range(5000), 2048)
    assert (exact, cut) == ("0-4999", False)
    # The longest ranges are kept first: the most items for the characters.
    mixed = [*range(0, 10), 20, 22, 24, *range(30, 1000)]
    assert pg.record_ranges(mixed, 12) == ("0-9,30-999", True)


def _lost_mid_run() -> tuple[dict[str, Any], dict[str, Any]]:
    """Stage a's Job ran items 0-39 and 50-59, the status recorded it, then it was lost."""
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    ja = _seen(p, job, active=10, completedIndexes="0-39,50-59")
    p = plan(observe(run, [ja], items=items_for(run, "a")))
    return advance(run, p), ja


def test_a_job_lost_mid_run_is_replaced_by_one_for_the_unrecorded_items() -> None:
    run, ja = _lost_mid_run()
    # Named with the labels of its pods: the Job is gone, its selector with it.
    assert lost.lost_jobs(run, []) == {ja["metadata"]["name"]: {
        "nightshift.io/pipeline-run": "nightly", "nightshift.io/stage": "a",
        "nightshift.io/attempt": "0"}}
    assert lost.lost_jobs(run, [ja]) == {}
    # Its pods are still going away: wait, so two pods never work on one item.
    p = plan(Observed(run=run, jobs=[], items=items_for(run, "a"), failure_samples={},
                      now=T0 + timedelta(minutes=1), runner_image="runner:dev",
                      live_pods={ja["metadata"]["name"]: 1}))
    assert p.apply == [] and p.requeue_after is not None
    assert p.status["phase"] == "Running"
    # ... and says so: pods left by --cascade=orphan, or on a dead node, would hold it.
    prog = next(c for c in p.status["conditions"] if c["type"] == "Progressing")
    assert prog["reason"] == "WaitingForLostJobPods", prog
    assert prog["message"] == (
        f"stage a: Job {ja['metadata']['name']} is gone but some of its pods are not; its "
        "replacement waits for them, so that no item runs twice (pods left by "
        "--cascade=orphan, or on a node that is gone: kubectl delete pods -n physics -l "
        "nightshift.io/attempt=0,nightshift.io/pipeline-run=nightly,nightshift.io/stage=a; "
        "one stuck Terminating on a node that no longer answers needs --grace-period=0 "
        "--force, once the node is known to be down)"), prog
    p = plan(observe(run, [], items=items_for(run, "a"), now=T0 + timedelta(minutes=2)))
    cms = [m for m in p.apply if m["kind"] == "ConfigMap"]
    (repl,) = jobs_of(p)
    assert repl["metadata"]["name"] == it.job_name("nightly", "a", 1)
    assert repl["spec"]["completions"] == 50
    indexes = "".join(c["data"][k] for c in cms for k in c["data"])
    assert indexes.split() == [str(i) for i in [*range(40, 50), *range(60, 100)]]
    assert repl["metadata"]["annotations"][names.ANNOTATION_SKIP_ITEMS] == "0-39,50-59"
    assert p.status["phase"] == "Running"
    assert "JobLost" in [e.reason for e in p.events]
    a = stage_status(p, "a")
    assert a["attempt"] == 1 and a["succeeded"] == 50
    assert a["attempts"][0]["reason"] == "JobLost"
    # The replacement is seen, then finishes: every item counted once, nothing else.
    run = advance(run, p)
    seen = _seen(p, repl, active=50)
    p = plan(observe(run, [seen], items=items_for(run, "a"), now=T0 + timedelta(minutes=3)))
    assert jobs_of(p) == [] and stage_status(p, "a")["succeeded"] == 50
    run = advance(run, p)
    p = plan(observe(run, [complete(seen)], items=items_for(run, "a", "b"),
                     now=T0 + timedelta(minutes=4)))
    a = stage_status(p, "a")
    assert (a["phase"], a["succeeded"], a["failed"], a["total"]) == ("Succeeded", 100, 0, 100)
    assert [j["metadata"]["labels"]["nightshift.io/stage"] for j in jobs_of(p)] == ["b"]


def test_a_created_job_not_seen_yet_is_applied_again_not_replaced() -> None:
    """No uid recorded: the Job may only be late; the same Job (same name) again."""
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    assert lost.lost_jobs(run, []) == {}
    again = plan(observe(run, [], items=items_for(run, "a"), now=T0 + timedelta(seconds=5)))
    assert [j["metadata"]["name"] for j in jobs_of(again)] == [job["metadata"]["name"]]


def test_a_retry_keeps_counting_when_the_first_attempts_job_is_removed() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    first = failed(job, "0-2,4-16,20-97", "3,17-19")
    first["metadata"]["uid"] = "uid-0"
    p = plan(observe(run, [first], items=items_for(run, "a")))
    run = advance(run, p)
    run["spec"]["rerunFailed"] = 1
    p = plan(observe(run, [first], items=items_for(run, "a")))
    (retry,) = jobs_of(p)
    run = advance(run, p)
    r = _seen(p, retry, active=6, completedIndexes="0-1")
    p = plan(observe(run, [first, r], items=items_for(run, "a")))
    assert stage_status(p, "a")["succeeded"] == 96
    run = advance(run, p)
    # A TTL controller removes the finished first attempt.
    p = plan(observe(run, [r], items=items_for(run, "a")))
    assert p.apply == []
    a = stage_status(p, "a")
    assert (a["phase"], a["succeeded"], a["attempt"]) == ("Running", 96, 1)
    assert [x["attempt"] for x in a["attempts"]] == [0, 1]
    run = advance(run, p)
    p = plan(observe(run, [complete(r)], items=items_for(run, "a", "b")))
    assert stage_status(p, "a")["phase"] == "Succeeded"
    assert stage_status(p, "a")["succeeded"] == 100


def test_rerun_of_a_failed_run_still_works_after_its_jobs_are_gone() -> None:
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": 9}})])
    p, job = start_a(run)
    run = advance(run, p)
    bad = failed(job, "0-6", "7-9")
    bad["metadata"]["uid"] = "uid-0"
    p = plan(observe(run, [bad], items=items_for(run, "a", count=10)))
    run = advance(run, p)
    run["spec"]["rerunFailed"] = 1
    p = plan(observe(run, [], items=items_for(run, "a", count=10)))
    (retry,) = jobs_of(p)
    assert retry["spec"]["completions"] == 3
    assert p.status["phase"] == "Running"


def test_record_of_a_finished_run_survives_a_pass_that_reads_no_status() -> None:
    """A finished run's counts come from the record, even when nothing else remains."""
    run, _, before = _succeeded_run()
    stripped = copy.deepcopy(run)
    p = plan(observe(stripped, [], items={}))
    assert p.apply == [] and p.resolve_items == []
    assert p.status["stages"] == before.status["stages"]
