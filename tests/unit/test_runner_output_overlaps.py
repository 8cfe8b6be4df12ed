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


@pytest.mark.parametrize(("paths", "said"), [
    ((("data", "out/{item}/"), ("data", "out/{item}")),
     "outputs[1].path: 'out/{item}' is the same prefix as outputs[0].path 'out/{item}/'"),
    ((("data", "out/{item}/"), ("data", "out/{item}/logs/")),
     "outputs[1].path: 'out/{item}/logs/' lies inside outputs[0].path 'out/{item}/'"),
])
def test_outputs_committing_to_one_prefix_are_named_with_the_fix(
        paths: tuple[tuple[str, str], ...], said: str) -> None:
    # An interleave output for the big files, a batch one for the rest: one _SUCCESS
    # would hide the other's files from the next stage.
    st = Stage.model_validate({
        "name": "s", "image": "busybox:1.36", "steps": [{"name": "m", "command": ["true"]}],
        "outputs": [{"storage": s, "path": p, "localPath": f"o{k}"}
                    for k, (s, p) in enumerate(paths)]})
    [problem] = output_overlaps(st, where="spec.stages[0]")
    assert problem.startswith(f"spec.stages[0].{said}, so both would commit to one prefix, "
                              "and the second _SUCCESS would list only its own files"), problem


def test_outputs_on_other_storages_or_sibling_paths_are_fine() -> None:
    st = Stage.model_validate({
        "name": "s", "image": "busybox:1.36", "steps": [{"name": "m", "command": ["true"]}],
        "outputs": [{"storage": "a", "path": "out/{item}/", "localPath": "x"},
                    {"storage": "b", "path": "out/{item}/", "localPath": "y"},
                    {"storage": "a", "path": "out/{item}-logs/", "localPath": "z"}]})
    assert output_overlaps(st) == []



@pytest.mark.parametrize(("p0", "p1"), [
    ("./out/{item}/", "out/{item}/logs/"),  # one directory on a pvc, one prefix
    ("out//{item}/", "out/{item}/"),
    ("", "out/{item}/"),  # the storage's own prefix holds every path
])
def test_paths_are_compared_as_normalised(p0: str, p1: str) -> None:
    st = Stage.model_validate(stage(outputs=[
        {"storage": "raw", "path": p0, "localPath": "a"},
        {"storage": "raw", "path": p1, "localPath": "b"}]))
    assert output_overlaps(st, where="spec.stages[0]"), "not refused"
