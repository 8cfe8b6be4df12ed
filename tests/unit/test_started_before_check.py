"""Checks added after runs could start with the problem (Problem.ratchet: a stage env
naming JOB_COMPLETION_INDEX or a NIGHTSHIFT_ variable, a repeated item) refuse a new run
but never stop one already going, as an operator upgrade found it: the run goes on, and
its Invalid condition (False, reason StartedBeforeCheck) and one event say what a new run
with that spec would be refused for."""

from __future__ import annotations

import copy
from typing import Any

from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift.pipelinerun.validate import check_items
from tests.bad_pipelineruns import stage
from tests.unit.test_plan import (
    advance,
    complete,
    condition,
    items_for,
    jobs_of,
    make_run,
    observe,
    with_status,
)

ITEMS = ["n1", "n2", "n1"]
ENV = [{"name": "NIGHTSHIFT_DEBUG", "value": "1"}]


def _older_spec(run: dict[str, Any]) -> dict[str, Any]:
    """The run with the spec an operator before these checks accepted and started."""
    out = copy.deepcopy(run)
    out["spec"]["stages"][0].update(forEach={"items": ITEMS}, env=ENV)
    return out


def _pass(run: dict[str, Any], jobs: list[dict[str, Any]]) -> Any:
    return plan(observe(run, jobs, items=items_for(run, "a", count=3)))


def test_a_new_run_with_the_problem_is_refused_and_starts_nothing() -> None:
    p = _pass(_older_spec(make_run([stage("a")])), [])
    assert jobs_of(p) == [] and p.status["phase"] == "Failed"
    invalid = condition(p, "Invalid")
    assert (invalid["status"], invalid["reason"]) == ("True", "ValidationFailed")
    assert "spec.stages[0].env[0].name: NIGHTSHIFT_DEBUG is set by Nightshift" in \
        invalid["message"]
    assert "spec.stages[0].forEach.items[2]: 'n1' repeats item 0" in invalid["message"]


def test_a_run_started_before_the_check_goes_on_and_says_what_a_new_one_would_meet() -> None:
    run = make_run([stage("a", forEach={"items": ["n1", "n2", "n3"]})])
    first = _pass(run, [])
    (job,) = jobs_of(first)
    run = _older_spec(advance(run, first))

    p = _pass(run, [with_status(job, active=3)])
    assert p.status["phase"] == "Running"
    invalid = condition(p, "Invalid")
    assert (invalid["status"], invalid["reason"]) == ("False", "StartedBeforeCheck")
    assert invalid["message"].startswith(
        "spec.stages[0].forEach.items[2]: 'n1' repeats item 0; list each item once")
    assert "; spec.stages[0].env[0].name: NIGHTSHIFT_DEBUG is set by Nightshift" in \
        invalid["message"]
    assert invalid["message"].endswith("it goes on as before, and a new run with this spec "
                                       "is refused")
    assert condition(p, "Failed")["status"] == "False"
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "StartedBeforeCheck")]

    # Said once; the run ends as any run does.
    run = advance(run, p)
    p = _pass(run, [complete(job)])
    assert p.status["phase"] == "Succeeded"
    assert condition(p, "Invalid")["reason"] == "StartedBeforeCheck"
    assert "StartedBeforeCheck" not in [e.reason for e in p.events]


def test_a_started_run_still_fails_on_a_check_it_always_met() -> None:
    run = make_run([stage("a", forEach={"items": ["n1", "n2", "n3"]})])
    first = _pass(run, [])
    (job,) = jobs_of(first)
    run = _older_spec(advance(run, first))
    run["spec"]["stages"][0]["env"] = [*ENV, {"name": "BAD=NAME", "value": "1"}]
    p = _pass(run, [with_status(job, active=3)])
    invalid = condition(p, "Invalid")
    assert (invalid["status"], invalid["reason"]) == ("True", "ValidationFailed")
    assert invalid["message"] == ("spec.stages[0].env[1].name: 'BAD=NAME' must be printable "
                                  "ASCII without '='")


def test_the_count_of_further_items_ratchets_only_when_all_are_repeats() -> None:
    st = PipelineRunSpec.model_validate({"stages": [stage("a")]}).stages[0]
    repeats = check_items("p", ["x"] * 8, st, "r")
    assert [p.ratchet for p in repeats] == [True] * 6
    assert repeats[-1].message == "2 more items have the same kinds of problem"
    mixed = check_items("p", ["x"] * 7 + ["bad\nline"], st, "r")
    assert [p.ratchet for p in mixed] == [True] * 5 + [False]


def test_an_invalid_run_never_says_it_goes_on() -> None:
    # Waived checks beside one it always met: Invalid, and no StartedBeforeCheck event.
    run = make_run([stage("a", forEach={"items": ["n1", "n2", "n3"]})])
    first = _pass(run, [])
    (job,) = jobs_of(first)
    run = _older_spec(advance(run, first))
    run["spec"]["stages"][0]["env"] = [*ENV, {"name": "BAD=NAME", "value": "1"}]
    for _ in range(2):
        p = _pass(run, [with_status(job, active=3)])
        assert condition(p, "Invalid")["status"] == "True"
        assert "StartedBeforeCheck" not in [e.reason for e in p.events]
        run = advance(run, p)
