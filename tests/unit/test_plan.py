"""plan(): level-based decisions from the run and its Jobs, pass after pass."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.api import conditions as cond
from nightshift.api import names
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import ItemsInfo, Observed, Plan
from tests.bad_pipelineruns import BAD, CEL_ONLY, stage

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def make_run(stages: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nightshift.io/v1alpha1", "kind": "PipelineRun",
        "metadata": {"name": "nightly", "namespace": "physics", "uid": "u1", "generation": 1},
        "spec": {"stages": stages if stages is not None else [
            stage("a", forEach={"range": {"from": 0, "to": 99}}),
            stage("b", dependsOn=["a"])], **spec},
    }


def items_for(run: dict[str, Any], *names: str, count: int = 100) -> dict[str, ItemsInfo]:
    return {n: ItemsInfo(count, (it.items_configmap_name("nightly", n, 0),)) for n in names}


def observe(run: dict[str, Any], jobs: list[dict[str, Any]] | None = None,
            items: dict[str, ItemsInfo] | None = None, now: datetime = T0,
            samples: dict[str, list[dict[str, Any]]] | None = None) -> Observed:
    return Observed(run=run, jobs=jobs or [], items=items or {}, failure_samples=samples or {},
                    now=now, runner_image="runner:dev")


def with_status(job: dict[str, Any], **status: Any) -> dict[str, Any]:
    out = copy.deepcopy(job)
    out["metadata"]["creationTimestamp"] = "2025-03-01T12:00:00Z"
    out["status"] = status
    return out


def complete(job: dict[str, Any]) -> dict[str, Any]:
    n = job["spec"]["completions"]
    return with_status(job, completedIndexes=f"0-{n - 1}" if n > 1 else "0", succeeded=n,
                       conditions=[{"type": "Complete", "status": "True",
                                    "lastTransitionTime": "2025-03-01T13:00:00Z"}])


def failed(job: dict[str, Any], done: str, bad: str, reason: str = "FailedIndexes"
           ) -> dict[str, Any]:
    return with_status(job, completedIndexes=done, failedIndexes=bad,
                       conditions=[{"type": "Failed", "status": "True", "reason": reason,
                                    "message": "Job has failed indexes",
                                    "lastTransitionTime": "2025-03-01T13:00:00Z"}])


def jobs_of(p: Plan) -> list[dict[str, Any]]:
    return [m for m in p.apply if m["kind"] == "Job"]


def advance(run: dict[str, Any], p: Plan) -> dict[str, Any]:
    """The run as the next pass sees it: with the status this pass wrote."""
    out = copy.deepcopy(run)
    out["status"] = p.status
    return out


def stage_status(p: Plan, name: str) -> dict[str, Any]:
    return next(s for s in p.status["stages"] if s["name"] == name)


def condition(p: Plan, type_: str) -> dict[str, Any]:
    c = cond.find(p.status["conditions"], type_)
    assert c is not None
    return dict(c)


def start_a(run: dict[str, Any]) -> tuple[Plan, dict[str, Any]]:
    p = plan(observe(run, items=items_for(run, "a")))
    (job,) = jobs_of(p)
    return p, job


def test_fresh_run_asks_for_items_first() -> None:
    run = make_run()
    p = plan(observe(run))
    assert p.resolve_items == ["a"] and p.apply == [] and p.patch == []
    assert p.status["phase"] == "Pending"
    assert condition(p, "Progressing")["reason"] == "ResolvingItems"


def test_first_stage_starts_once_and_only_once() -> None:
    run = make_run()
    p, job = start_a(run)
    assert job["metadata"]["name"] == it.job_name("nightly", "a", 0)
    assert job["spec"]["completions"] == 100
    assert p.status["phase"] == "Running"
    assert [e.reason for e in p.events] == ["StageStarted"]
    assert stage_status(p, "a")["attempts"][0]["startTime"] == "2025-03-01T12:00:00Z"
    assert stage_status(p, "b") == {"name": "b", "phase": "Pending"}
    # Informer lag: the Job is not visible yet, status was written. Same Job, same name.
    lag = plan(observe(advance(run, p), items=items_for(run, "a"), now=T0 + timedelta(1)))
    assert [j["metadata"]["name"] for j in jobs_of(lag)] == [job["metadata"]["name"]]
    # The Job is visible: nothing to create, nothing to say, status unchanged.
    seen = plan(observe(advance(run, p), [with_status(job, active=100)],
                        items=items_for(run, "a")))
    assert seen.apply == [] and seen.patch == [] and seen.events == []
    assert stage_status(seen, "a")["running"] == 100


def test_plan_is_deterministic() -> None:
    run = make_run()
    a = plan(observe(run, items=items_for(run, "a")))
    b = plan(observe(run, items=items_for(run, "a")))
    assert json.dumps(a.status, sort_keys=True) == json.dumps(b.status, sort_keys=True)
    assert a.apply == b.apply


def test_barrier_then_success() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    p = plan(observe(run, [complete(job)], items=items_for(run, "a")))
    assert stage_status(p, "a")["phase"] == "Succeeded"
    assert p.resolve_items == ["b"]
    p = plan(observe(run, [complete(job)], items={**items_for(run, "a"),
                                                  **items_for(run, "b", count=1)}))
    (job_b,) = jobs_of(p)
    assert job_b["metadata"]["labels"]["nightshift.io/stage"] == "b"
    run = advance(run, p)
    p = plan(observe(run, [complete(job), complete(job_b)],
                     items={**items_for(run, "a"), **items_for(run, "b", count=1)}))
    assert p.status["phase"] == "Succeeded"
    assert p.status["progress"] == "101/101"
    assert condition(p, "Ready")["status"] == "True"
    assert "RunSucceeded" in [e.reason for e in p.events]


def test_failed_stage_fails_the_run_and_dependents_never_start() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    bad = failed(job, "0-2,4-16,20-99", "3,17-19")
    samples = {"a": [{"index": 17, "exitCode": 3, "reason": "Error", "message": "bad night",
                      "job": job["metadata"]["name"]}]}
    p = plan(observe(run, [bad], items=items_for(run, "a", "b"), samples=samples))
    a = stage_status(p, "a")
    assert a["phase"] == "Failed" and a["failedItems"] == "3,17-19" and a["failed"] == 4
    assert a["failureSamples"] == [{"index": 17, "exitCode": 3, "reason": "Error",
                                    "message": "bad night"}]
    assert p.status["phase"] == "Failed" and jobs_of(p) == [] and p.resolve_items == []
    f = condition(p, "Failed")
    assert f["status"] == "True" and "3,17-19" in f["message"]
    assert {(e.type, e.reason) for e in p.events} == {("Warning", "StageFailed"),
                                                     ("Warning", "RunFailed")}


def test_tolerated_failures_let_dependents_start() -> None:
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": 99}}, tolerateFailedItems=5),
                    stage("b", dependsOn=["a"])])
    p, job = start_a(run)
    assert job["spec"]["maxFailedIndexes"] == 5
    p = plan(observe(advance(run, p), [failed(job, "0-2,4-16,20-99", "3,17-19")],
                     items=items_for(run, "a", "b")))
    assert stage_status(p, "a")["phase"] == "Succeeded"
    assert [j["metadata"]["labels"]["nightshift.io/stage"] for j in jobs_of(p)] == ["b"]


def test_max_failed_indexes_exceeded_fails_even_with_tolerance() -> None:
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": 99}},
                          tolerateFailedItems=1)])
    p, job = start_a(run)
    p = plan(observe(advance(run, p), [failed(job, "0-9", "3,5", "MaxFailedIndexesExceeded")],
                     items=items_for(run, "a")))
    assert stage_status(p, "a")["phase"] == "Failed"
    assert stage_status(p, "a")["reason"] == "MaxFailedIndexesExceeded"


def test_rerun_failed_runs_exactly_the_unfinished_items_once() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    # Items 3,17-19 failed; the Job stopped before 98-99 ran.
    first = failed(job, "0-2,4-16,20-97", "3,17-19")
    p = plan(observe(run, [first], items=items_for(run, "a")))
    run = advance(run, p)
    run["spec"]["rerunFailed"] = 1
    p = plan(observe(run, [first], items=items_for(run, "a"), now=T0 + timedelta(hours=2)))
    cms = [m for m in p.apply if m["kind"] == "ConfigMap"]
    (retry,) = jobs_of(p)
    assert cms[0]["data"][names.INDEXES_KEY] == "3\n17\n18\n19\n98\n99\n"
    assert retry["spec"]["completions"] == 6
    assert retry["metadata"]["labels"]["nightshift.io/attempt"] == "1"
    assert retry["metadata"]["annotations"][names.ANNOTATION_RERUN] == "1"
    assert p.status["rerunFailed"] == 1 and p.status["phase"] == "Running"
    assert [e.reason for e in p.events] == ["RetryStarted"]
    # The status write was lost: the retry Job itself says the request was handled.
    lost = copy.deepcopy(run)
    again = failed(retry, "0-4", "5")
    p2 = plan(observe(lost, [first, again], items=items_for(run, "a")))
    assert jobs_of(p2) == [] and p2.status["rerunFailed"] == 1
    a = stage_status(p2, "a")
    assert a["succeeded"] == 99 and a["failedItems"] == "99" and a["attempt"] == 1
    assert [x["attempt"] for x in a["attempts"]] == [0, 1]
    assert a["attempts"][0]["failedItems"] == "3,17-19"
    # The retry succeeds: the stage completes and its dependent starts.
    run = advance(run, p)
    p3 = plan(observe(run, [first, complete(retry)], items=items_for(run, "a", "b")))
    assert stage_status(p3, "a")["phase"] == "Succeeded"
    assert stage_status(p3, "a")["succeeded"] == 100
    assert [j["metadata"]["labels"]["nightshift.io/stage"] for j in jobs_of(p3)] == ["b"]


def test_rerun_waits_for_the_run_to_finish() -> None:
    run = make_run(rerunFailed=1)
    p, job = start_a(run)
    assert p.status["rerunFailed"] == 0
    p = plan(observe(advance(run, p), [with_status(job, active=3)], items=items_for(run, "a")))
    assert jobs_of(p) == [] and p.status["rerunFailed"] == 0


def test_suspend_and_resume_patch_the_job() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    run["spec"]["suspend"] = True
    p = plan(observe(run, [with_status(job, active=5)], items=items_for(run, "a")))
    assert p.patch[0]["spec"] == {"suspend": True}
    assert p.status["phase"] == "Suspended" and p.apply == []
    run = advance(run, p)
    suspended = with_status({**job, "spec": {**job["spec"], "suspend": True}}, active=0)
    run["spec"]["suspend"] = False
    p = plan(observe(run, [suspended], items=items_for(run, "a")))
    assert p.patch[0]["spec"] == {"suspend": False}
    assert "RunResumed" in [e.reason for e in p.events]


def test_cancel_suspends_jobs_and_is_final() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    run["spec"]["cancel"] = True
    p = plan(observe(run, [with_status(job, active=5)], items=items_for(run, "a", "b")))
    assert p.patch[0]["spec"] == {"suspend": True} and p.apply == []
    assert p.status["phase"] == "Cancelled"
    assert stage_status(p, "a")["phase"] == "Cancelled"
    assert condition(p, "Progressing")["status"] == "False"


def test_parallelism_is_mutable_through_spec_parallelism() -> None:
    run = make_run()
    p, job = start_a(run)
    assert job["spec"]["parallelism"] == 100
    run = advance(run, p)
    run["spec"]["parallelism"] = {"a": 7}
    p = plan(observe(run, [with_status(job, active=100)], items=items_for(run, "a")))
    assert p.patch == [{"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": job["metadata"]["name"], "namespace": "physics"},
                        "spec": {"parallelism": 7}}]


def test_staggered_launch_raises_parallelism_from_the_recorded_start() -> None:
    run = make_run(launch={"maxPodsPerMinute": 30})
    p, job = start_a(run)
    # Waves of 30 * 10 / 60 = 5 pods every 10 s.
    assert job["spec"]["parallelism"] == 5 and p.requeue_after == 10
    run = advance(run, p)
    # A restarted operator: the start time comes from status, not memory.
    later = T0 + timedelta(seconds=95)
    p = plan(observe(run, [with_status(job, active=5)], items=items_for(run, "a"), now=later))
    assert p.patch[0]["spec"] == {"parallelism": 50} and p.requeue_after == 5
    p = plan(observe(run, [with_status(job, active=30)], items=items_for(run, "a"),
                     now=T0 + timedelta(minutes=5)))
    assert p.patch[0]["spec"] == {"parallelism": 100} and p.requeue_after is None


def test_invalid_run_creates_nothing_and_says_where() -> None:
    run = make_run([stage("a", dependsOn=["b"]), stage("b", dependsOn=["a"])])
    p = plan(observe(run))
    assert p.apply == [] and p.resolve_items == [] and p.status["phase"] == "Failed"
    inv = condition(p, "Invalid")
    assert inv["status"] == "True" and "spec.stages[0].dependsOn[0]" in inv["message"]
    assert [e.reason for e in p.events] == ["Invalid"]


def test_zero_resolved_items_is_invalid() -> None:
    run = make_run([stage("a", forEach={"fromConfigMap": {"name": "list"}})])
    p = plan(observe(run, items=items_for(run, "a", count=0)))
    assert p.apply == [] and "spec.stages[0].forEach: gives no items" in condition(
        p, "Invalid")["message"]


@pytest.mark.parametrize(("case_id", "manifest", "expected", "substring"), BAD,
                         ids=[c[0] for c in BAD])
def test_every_bad_input_ends_invalid(case_id: str, manifest: dict[str, Any], expected: str,
                                      substring: str) -> None:
    m = copy.deepcopy(manifest)
    m["metadata"].update(uid="u", generation=1)
    p = plan(observe(m))
    if case_id in CEL_ONLY:
        assert condition(p, "Invalid")["status"] == "False" and p.resolve_items, p.status
        return
    assert p.apply == [] and condition(p, "Invalid")["status"] == "True"


def test_second_pass_with_nothing_new_writes_nothing() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    obs = observe(run, [with_status(job, active=3)], items=items_for(run, "a"),
                  now=T0 + timedelta(minutes=3))
    p2 = plan(obs)
    run2 = advance(run, p2)
    p3 = plan(observe(run2, [with_status(job, active=3)], items=items_for(run, "a"),
                      now=T0 + timedelta(minutes=9)))
    assert p3.status == run2["status"] and p3.events == []


def test_status_stays_small_at_100k_items_with_many_failures() -> None:
    stages = [stage("split", forEach={"range": {"from": 0, "to": 99_999}}),
              stage("invert", forEach={"range": {"from": 0, "to": 99_999}},
                    tolerateFailedItems=10_000),
              stage("concat", dependsOn=["split"])]
    run = make_run(stages)
    p = plan(observe(run, items={"split": ItemsInfo(100_000, ("x",)),
                                 "invert": ItemsInfo(100_000, ("y",))}))
    observed = []
    for job in jobs_of(p):
        observed.append(failed(job, ",".join(str(i) for i in range(0, 100_000, 2)),
                               ",".join(str(i) for i in range(1, 100_000, 2))))
    samples = {s: [{"index": i, "exitCode": 1, "reason": "Error", "message": "x" * 5000}
                   for i in range(50)] for s in ("split", "invert")}
    p = plan(observe(advance(run, p), observed,
                     items={"split": ItemsInfo(100_000, ("x",)),
                            "invert": ItemsInfo(100_000, ("y",))}, samples=samples))
    size = len(json.dumps(p.status))
    assert size < 16_000, size
    assert stage_status(p, "split")["failedItemsTruncated"] is True


def test_unresolved_items_wait_with_a_condition_and_one_event() -> None:
    from dataclasses import replace as _replace
    obs = observe(make_run())
    first = plan(obs)
    assert first.resolve_items == ["a"]
    why = "ConfigMap nights not found: create it"
    p = plan(_replace(obs, unresolved={"a": (why, False)}))
    assert p.apply == [] and p.resolve_items == [] and p.requeue_after == 10.0
    c = next(c for c in p.status["conditions"] if c["type"] == "Progressing")
    assert c["status"] == "False" and c["reason"] == "ItemsUnresolved"
    assert c["message"] == f"stage a: {why}"
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "ItemsUnresolved")]
    # The same reason on the next pass: no second event.
    again = _replace(obs, run={**obs.run, "status": p.status}, unresolved={"a": (why, False)})
    assert plan(again).events == []
    bad = plan(_replace(obs, unresolved={"a": ("item 3 has a NUL", True)}))
    assert bad.status["phase"] == "Failed"
    conds = {c["type"]: c for c in bad.status["conditions"]}
    assert (conds["Invalid"]["status"], conds["Invalid"]["reason"]) == ("True", "InvalidItems")
    # Failed and Ready agree with the phase (they said NoFailure and "run is Pending").
    assert (conds["Failed"]["status"], conds["Failed"]["reason"]) == ("True", "InvalidItems")
    assert conds["Failed"]["message"] == "stage a: item 3 has a NUL"
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "Failed")
    assert len(bad.status["conditions"]) == len(conds), "one condition per type"


def test_a_failed_stage_fails_the_run_only_once_the_other_branches_end() -> None:
    # a and b run side by side; c needs both. a fails while b runs: no new stage
    # starts, b goes on (and costs), and the run says so; Failed once b ends.
    rng = {"range": {"from": 0, "to": 99}}
    run = make_run([stage("a", forEach=rng), stage("b", forEach=rng),
                    stage("c", dependsOn=["a", "b"])])
    p = plan(observe(run, items=items_for(run, "a", "b")))
    job_a, job_b = jobs_of(p)
    run = advance(run, p)
    p = plan(observe(run, [failed(job_a, "0-2,4-99", "3"), job_b],
                     items=items_for(run, "a", "b", "c")))
    assert p.status["phase"] == "Running" and "completionTime" not in p.status
    assert jobs_of(p) == [] and stage_status(p, "b")["phase"] == "Running"
    c = condition(p, "Progressing")
    assert (c["status"], c["reason"]) == ("True", "Failing")
    assert c["message"] == ("stage a: FailedIndexes, 1 failed items (3); no new stage "
                            "starts, and the run is Failed once b ends (spec.cancel stops "
                            "it now)"), c
    assert condition(p, "Failed")["status"] == "False"
    run = advance(run, p)
    p = plan(observe(run, [failed(job_a, "0-2,4-99", "3"), complete(job_b)],
                     items=items_for(run, "a", "b", "c")))
    assert p.status["phase"] == "Failed" and p.status["completionTime"]
    assert condition(p, "Failed")["status"] == "True" and jobs_of(p) == []
    assert "RunFailed" in [e.reason for e in p.events]
