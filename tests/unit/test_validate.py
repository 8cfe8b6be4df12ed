"""The bad-input table against the Python side of validation (CEL cases run in integration)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nightshift.pipelinerun import validate
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import BAD, CEL_ONLY, run, stage


def problems(manifest: dict[str, Any]) -> list[str]:
    try:
        spec = PipelineRunSpec.model_validate(manifest["spec"])
    except ValidationError as e:
        return [str(e)]
    return [str(p) for p in validate.validate_spec(spec, manifest["metadata"]["name"])]


@pytest.mark.parametrize(("case_id", "manifest", "expected", "substring"), BAD,
                         ids=[c[0] for c in BAD])
def test_bad_input_is_refused(case_id: str, manifest: dict[str, Any], expected: str,
                              substring: str) -> None:
    found = problems(manifest)
    if case_id in CEL_ONLY:
        assert found == [], found
        return
    assert found, f"{case_id}: the Python side accepted it"
    if expected == "invalid":
        assert any(substring in p for p in found), found


def test_good_run_has_no_problems() -> None:
    m = run([stage("a", forEach={"range": {"from": 1, "to": 700, "format": "night-{:04d}"}}),
             stage("b", dependsOn=["a"])])
    assert problems(m) == []


def test_problem_names_the_field_path() -> None:
    m = run([stage("a"), stage("b", dependsOn=["a", "zz"])])
    found = problems(m)
    assert any(p.startswith("spec.stages[1].dependsOn[1]: ") and "use one of a, b" in p
               for p in found), found


def test_cycle_path_points_at_an_edge_of_the_cycle() -> None:
    m = run([stage("x"), stage("a", dependsOn=["b"]), stage("b", dependsOn=["a"])])
    found = problems(m)
    assert len(found) == 1
    assert found[0].startswith("spec.stages[1].dependsOn[0]: dependency cycle a -> b -> a")


def test_many_bad_items_are_summarised() -> None:
    m = run([stage(forEach={"items": [f"x\n{i}" for i in range(50)]})])
    found = problems(m)
    assert len(found) == 6 and "45 more items" in found[-1]


def test_tolerate_makes_100001_items_valid() -> None:
    m = run([stage(forEach={"range": {"from": 0, "to": 100_000}}, tolerateFailedItems=10)])
    assert problems(m) == []


def test_check_count_for_resolved_items() -> None:
    st = PipelineRunSpec.model_validate(run()["spec"]).stages[0]
    assert validate.check_count("p", 0, st)[0].path == "p"
    assert validate.check_count("p", 100_000, st) == []
    assert "tolerateFailedItems" in str(validate.check_count("p", 100_001, st)[0])


def test_find_cycle() -> None:
    assert validate.find_cycle({"a": ["b"], "b": []}) == []
    assert validate.find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c"]
