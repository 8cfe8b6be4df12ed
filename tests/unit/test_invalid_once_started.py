"""A run found invalid after its first stage started (an operator upgrade that no longer
allows its runner image, a refused Job, a later stage's invalid items): the running Job
goes on to its end and still obeys the operating knobs, nothing new starts, and the run
is Failed only once nothing runs."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

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
    with_status,
)

IMAGE = "registry.example/runner:1.1"


def _pass(run: dict[str, Any], jobs: list[dict[str, Any]], allowed: tuple[str, ...],
          refused: tuple[tuple[str, str], ...] = (),
          unresolved: Mapping[str, tuple[str, bool]] | None = None) -> Plan:
    return plan(Observed(run=run, jobs=jobs, items=items_for(run, "a", "b"),
                         failure_samples={}, now=T0, runner_image="runner:dev",
                         runner_images=allowed, refused=refused,
                         unresolved=unresolved or {}))


def _branches(**spec: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """a and b side by side, c after a with items from an S3 listing (resolved once a is
    done): the run after its first pass, and a's and b's Jobs."""
    rng = {"range": {"from": 0, "to": 99}}
    run = make_run([stage("a", forEach=rng), stage("b", forEach=rng),
                    stage("c", dependsOn=["a"], forEach={"fromS3": {"storage": "raw"}})],
                   storage=[{"name": "raw", "s3": {"bucket": "raw"}}], **spec)
    first = _pass(run, [], (IMAGE,))
    job_a, job_b = jobs_of(first)
    return advance(run, first), job_a, job_b


def _a_done(run: dict[str, Any], job_a: dict[str, Any], b: dict[str, Any],
            allowed: tuple[str, ...] = (), **unresolved: tuple[str, bool]) -> Plan:
    """A pass with a's Job complete and b's as given."""
    return _pass(run, [complete(job_a), b], allowed, unresolved=unresolved)


def test_a_run_found_invalid_while_a_stage_runs_ends_it_then_fails() -> None:
    run = make_run(runnerImage=IMAGE)
    first = _pass(run, [], (IMAGE,))
    (job,) = jobs_of(first)
    run = advance(run, first)
    # The operator restarted without the image in NIGHTSHIFT_RUNNER_IMAGES.
    p = _pass(run, [with_status(job, active=100)], ())
    assert p.status["phase"] == "Running" and "completionTime" not in p.status
    assert p.apply == [] and p.resolve_items == []
    assert condition(p, "Invalid")["status"] == "True"
    assert condition(p, "Failed")["status"] == "False"
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("True", "Invalid")
    assert prog["message"].startswith(f"spec.runnerImage: '{IMAGE}' is not a runner image")
    assert prog["message"].endswith(
        "no new stage starts, and the run is Failed once a ends (spec.cancel stops it now)")
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "Invalid")]
    invalid_pass = p

    cancelled = copy.deepcopy(run)
    cancelled["spec"]["cancel"] = True
    p = _pass(cancelled, [with_status(job, active=100)], ())
    assert [(x["metadata"]["name"], x["spec"]) for x in p.patch] == [
        (job["metadata"]["name"], {"suspend": True})]

    again = _pass(advance(run, invalid_pass), [with_status(job, active=90)], ())
    assert again.events == [] and again.status["phase"] == "Running"
    p = _pass(advance(run, again), [complete(job)], ())
    assert p.status["phase"] == "Failed" and p.status.get("completionTime")
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "StageSucceeded"),
                                                      ("Warning", "RunFailed")]
    assert jobs_of(p) == [] and p.resolve_items == []
    failed = condition(p, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "Invalid")


def test_a_run_invalid_at_creation_fails_at_once() -> None:
    p = _pass(make_run(runnerImage=IMAGE), [], ())
    assert p.status["phase"] == "Failed" and p.apply == []
    assert condition(p, "Failed")["reason"] == "Invalid"


def test_an_invalid_run_whose_job_is_lost_fails_once_its_pods_end() -> None:
    run = make_run(runnerImage=IMAGE)
    first = _pass(run, [], (IMAGE,))
    (job,) = jobs_of(first)
    seen = with_status(job, active=100)
    seen["metadata"]["uid"] = "job-uid"  # recorded: a Job gone after this is lost
    run = advance(run, _pass(run, [seen], (IMAGE,)))
    # The Job deleted by hand (orphaning its pods), and the image no longer allowed:
    # while its pods run the stage is not over, and nothing replaces it.
    name = job["metadata"]["name"]
    p = plan(Observed(run=run, jobs=[], items=items_for(run, "a", "b"), failure_samples={},
                      now=T0, runner_image="runner:dev", live_pods={name: 3}))
    assert p.apply == [] and p.status["phase"] == "Running", p.status
    assert p.status["stages"][0]["phase"] == "Running"
    assert p.requeue_after is not None and p.requeue_after <= 5.0
    said = condition(p, "Progressing")["message"]
    assert f"Job {name} is gone but some of its pods are not; the stage ends once they do" in said
    assert "kubectl delete pods -n physics -l " in said
    run = advance(run, p)
    p = _pass(run, [], ())  # its pods are gone
    assert p.apply == [] and p.status["phase"] == "Failed", p.status
    (a, _) = p.status["stages"]
    assert (a["phase"], a["reason"]) == ("Failed", "JobLost"), a
    assert "an Invalid run starts no replacement" in a["message"]


def test_a_job_refused_while_another_runs_is_not_applied_again() -> None:
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": 99}}), stage("b")])
    first = _pass(run, [], ())
    job_a, job_b = jobs_of(first)
    running = [with_status(job_a, active=10)]
    run = advance(run, first)
    # The API server refused b's Job (a policy): seen only in the pass that met it.
    why = (f"Job {job_b['metadata']['name']}", "422 Invalid: denied by a policy")
    refused = _pass(run, running, (), refused=(why,))
    assert refused.status["phase"] == "Running" and refused.apply == []
    for _ in range(2):
        run = advance(run, refused)
        refused = _pass(run, running, ())
        assert refused.apply == [] and refused.events == [], refused.apply
        assert condition(refused, "Invalid")["status"] == "True"
    end = _pass(advance(run, refused), [complete(job_a)], ())
    assert end.status["phase"] == "Failed" and end.apply == []
    assert "RunFailed" in [e.reason for e in end.events]


def test_invalid_found_as_the_last_job_ends_says_both() -> None:
    run = make_run(runnerImage=IMAGE)
    first = _pass(run, [], (IMAGE,))
    (job,) = jobs_of(first)
    p = _pass(advance(run, first), [complete(job)], ())  # a done, b may not start
    assert p.status["phase"] == "Failed"
    assert [e.reason for e in p.events] == ["StageSucceeded", "Invalid", "RunFailed"]


def test_a_finished_run_found_invalid_later_says_nothing_again() -> None:
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": 99}})], runnerImage=IMAGE)
    first = _pass(run, [], (IMAGE,))
    (job,) = jobs_of(first)
    done = _pass(advance(run, first), [complete(job)], (IMAGE,))
    assert done.status["phase"] == "Succeeded"
    run = advance(run, done)
    for _ in range(2):  # every resync of the finished run, after the upgrade
        p = _pass(run, [complete(job)], ())
        assert p.events == [] and p.status["phase"] == "Succeeded"
        run = advance(run, p)


def test_an_invalid_suspended_run_says_what_lets_its_jobs_end() -> None:
    run = make_run(runnerImage=IMAGE)
    first = _pass(run, [], (IMAGE,))
    (job,) = jobs_of(first)
    run = advance(run, first)
    run["spec"]["suspend"] = True
    held = with_status(job, active=0)
    held["spec"]["suspend"] = True
    p = _pass(run, [held], ())
    assert p.status["phase"] == "Suspended"
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("False", "Invalid")
    assert prog["message"].endswith("(suspended: set spec.suspend false to let them end, "
                                    "or spec.cancel)")


def test_items_found_invalid_while_another_stage_runs_fail_the_run_once_it_ends() -> None:
    # a and b run side by side; c needs a. a is done, b still runs, and c's items turn
    # out invalid (a listing that finds nothing): b goes on, nothing new starts, and the
    # run is Failed, reason InvalidItems, once b ends.
    run, job_a, job_b = _branches()
    asks = _a_done(run, job_a, with_status(job_b, active=10))
    assert asks.resolve_items == ["c"]
    why = "spec.stages[2].forEach.fromS3: s3://raw/* lists no objects"
    p = _a_done(run, job_a, with_status(job_b, active=10), c=(why, True))
    assert p.status["phase"] == "Running" and p.apply == [] and p.resolve_items == []
    invalid = condition(p, "Invalid")
    assert (invalid["status"], invalid["reason"]) == ("True", "InvalidItems")
    assert invalid["message"] == f"stage c: {why}"
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("True", "Invalid")
    assert prog["message"] == (f"stage c: {why}; no new stage starts, and the run is Failed "
                               "once b ends (spec.cancel stops it now)")
    assert condition(p, "Failed")["status"] == "False"
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "StageSucceeded"),
                                                      ("Warning", "InvalidItems")]
    # Cancel still reaches b's Job while the run is invalid.
    cancelled = copy.deepcopy(advance(run, p))
    cancelled["spec"]["cancel"] = True
    patched = _a_done(cancelled, job_a, with_status(job_b, active=10)).patch
    assert [x["spec"] for x in patched] == [{"suspend": True}]
    # The next pass does not resolve c again: the condition stands.
    run = advance(run, p)
    again = _a_done(run, job_a, with_status(job_b, active=5))
    assert again.resolve_items == [] and again.apply == [] and again.events == []
    assert again.status["phase"] == "Running"
    assert condition(again, "Invalid")["reason"] == "InvalidItems"
    end = _a_done(advance(run, again), job_a, complete(job_b))
    assert end.status["phase"] == "Failed" and end.status.get("completionTime")
    failed = condition(end, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "InvalidItems")
    assert failed["message"] == f"stage c: {why}"
    assert [e.reason for e in end.events] == ["StageSucceeded", "RunFailed"]
    assert end.resolve_items == [] and end.apply == []


def test_a_problem_found_after_invalid_items_is_added_to_the_standing_message() -> None:
    # c's items were found invalid while b ran; then the operator is upgraded without the
    # run's runner image. Neither message is lost, on this pass or the next.
    run, job_a, job_b = _branches(runnerImage=IMAGE)
    b = with_status(job_b, active=5)
    why = "spec.stages[2].forEach.fromS3: s3://raw/* lists no objects"
    p = _a_done(run, job_a, b, (IMAGE,), c=(why, True))
    assert condition(p, "Invalid")["reason"] == "InvalidItems"
    for _ in range(2):
        run = advance(run, p)
        p = _a_done(run, job_a, b)
        invalid = condition(p, "Invalid")
        assert invalid["reason"] == "ValidationFailed", "no longer only the items"
        assert invalid["message"].startswith(f"stage c: {why}; spec.runnerImage: "), invalid
        assert invalid["message"].count("stage c:") == 1
        assert p.status["phase"] == "Running" and p.apply == []


def test_items_and_a_count_found_in_one_pass_keep_the_reason_of_both() -> None:
    # c's items do not resolve and d's are too many for the Job API in the same pass:
    # the count problem is a problem of the spec (ValidationFailed), now and after.
    rng = {"range": {"from": 0, "to": 99}}
    run = make_run([stage("a", forEach=rng), stage("c", dependsOn=["a"],
                                                   forEach={"fromS3": {"storage": "raw"}}),
                    stage("d", dependsOn=["a"], forEach={"fromS3": {"storage": "raw"}})],
                   storage=[{"name": "raw", "s3": {"bucket": "raw"}}])
    first = plan(Observed(run=run, jobs=[], items=items_for(run, "a"), failure_samples={},
                          now=T0, runner_image="runner:dev"))
    (job_a,) = jobs_of(first)
    run = advance(run, first)
    items = {**items_for(run, "a"), **items_for(run, "d", count=150_000)}
    reasons = []
    for unresolved in ({"c": ("no objects", True)}, {}):
        p = plan(Observed(run=run, jobs=[complete(job_a)], items=items, failure_samples={},
                          now=T0, runner_image="runner:dev", unresolved=unresolved))
        reasons.append(condition(p, "Invalid")["reason"])
        assert "stage c: no objects" in condition(p, "Invalid")["message"]
        run = advance(run, p)
    assert reasons == ["ValidationFailed", "ValidationFailed"]
    assert p.status["phase"] == "Failed"


def test_rerun_failed_does_not_resume_a_run_failed_for_invalid_items() -> None:
    # b failed an item and c's items were invalid: a rerunFailed request retries
    # neither (a new run is needed), and c's items are not resolved again.
    run, job_a, job_b = _branches()
    run = advance(run, _a_done(run, job_a, with_status(job_b, active=10), c=("no objects", True)))
    done = _a_done(run, job_a, failed(job_b, "0-98", "99"))
    assert done.status["phase"] == "Failed"
    run = advance(run, done)
    run["spec"]["rerunFailed"] = 1
    p = _a_done(run, job_a, failed(job_b, "0-98", "99"))
    assert p.apply == [] and p.resolve_items == [] and p.events == []
    assert p.status["phase"] == "Failed" and p.status["rerunFailed"] == 0
