"""Two outputs of a stage whose localPaths nest ("" is all of outputs/) are refused,
naming the inner output's field and the fix; a run started before the check goes on.

Found by an audit: every file of the inner output was committed twice, once by each
output, and listed in both manifests, with nothing said.
"""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.pipelinerun.runnerparts import output_overlaps
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage
from nightshift.pipelinerun.validate import validate_spec
from tests.bad_pipelineruns import S3, stage


def outputs(*local: str) -> Stage:
    return Stage.model_validate(stage(outputs=[
        {"storage": "raw", "path": f"o{i}/{{item}}/", "localPath": p}
        for i, p in enumerate(local)]))


@pytest.mark.parametrize(("local", "said"), [
    (("", "logs"), "outputs[1].localPath: 'logs' lies inside outputs[0].localPath ''"),
    (("cat/", "cat/deep/x"),
     "outputs[1].localPath: 'cat/deep/x' lies inside outputs[0].localPath 'cat/'"),
    (("logs", "."), "outputs[0].localPath: 'logs' lies inside outputs[1].localPath '.'"),
    (("a", "a/"), "outputs[1].localPath: 'a/' is the same directory as outputs[0].localPath 'a'"),
])
def test_nested_local_paths_are_named_with_the_fix(local: tuple[str, ...], said: str) -> None:
    [problem] = output_overlaps(outputs(*local), where="spec.stages[0]")
    assert problem.startswith(f"spec.stages[0].{said}, so its files would be committed "
                              "twice, by both outputs; give each output a directory of "
                              "its own under outputs/"), problem


@pytest.mark.parametrize("local", [("a", "b"), ("cat", "catalog"), ("a/b", "a/c"), ("x",)])
def test_separate_local_paths_are_fine(local: tuple[str, ...]) -> None:
    assert output_overlaps(outputs(*local)) == []


def test_the_problem_refuses_a_new_run_but_ratchets() -> None:
    spec: dict[str, Any] = {"storage": S3, "stages": [stage(outputs=[
        {"storage": "raw", "path": "out/{item}/"},
        {"storage": "raw", "path": "logs/{item}/", "localPath": "logs"}])]}
    [problem] = [p for p in validate_spec(PipelineRunSpec.model_validate(spec), "r")
                 if "localPath" in p.path]
    assert problem.path == "spec.stages[0].outputs[1].localPath" and problem.ratchet
