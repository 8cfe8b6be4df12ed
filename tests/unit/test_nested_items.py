"""Items whose output prefixes nest (`a` commits to out/a/, `a/b` to out/a/b/) are refused
with both items named and the fix; prefixes that only share leading characters, or
that a suffix after {item} keeps apart, are not (pipelinerun/nesteditems.py)."""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.pipelinerun.nesteditems import nested_items
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage
from nightshift.pipelinerun.validate import check_items
from tests.bad_pipelineruns import S3, stage


def _stage(*outputs: dict[str, Any], items: list[str] | None = None) -> Stage:
    body = stage("a", forEach={"items": items or ["x"]}, outputs=list(outputs))
    return PipelineRunSpec.model_validate({"stages": [body], "storage": S3}).stages[0]


def _out(path: str, storage: str = "raw") -> dict[str, Any]:
    return {"storage": storage, "path": path}


def test_an_item_inside_another_is_refused_naming_both_and_the_fix() -> None:
    st = _stage(_out("out/{item}"))
    (p,) = nested_items("f.items", ["a", "b", "a/b"], st, "r")
    assert p.path == "f.items[2]" and p.ratchet
    assert p.message.startswith("'a/b' commits outputs[0] to 'out/a/b/', inside item 0 "
                                "('a')'s outputs[0] prefix")
    assert p.message.endswith("end outputs[0].path after {item} with a suffix of its own "
                              "(e.g. 'out/{item}.d/')")


@pytest.mark.parametrize("items", [
    ["a", "ab/c"],          # shares characters, not a folder
    ["a/b", "a/c", "a/d/e"],  # siblings and a deeper sibling, none an item's own prefix
    ["a.b", "a/b"],
])
def test_prefixes_that_do_not_nest_pass(items: list[str]) -> None:
    assert nested_items("p", items, _stage(_out("out/{item}/")), "r") == []


def test_a_suffix_after_the_item_keeps_them_apart() -> None:
    assert nested_items("p", ["a", "a/b"], _stage(_out("out/{item}.d/")), "r") == []
    assert nested_items("p", ["a", "a/b"], _stage(_out("out/{item}/main/")), "r") == []


def test_across_outputs_on_one_storage_not_across_storages() -> None:
    # No '/' in any value: item z's d/a/z/ (outputs[1]) lies in item a's d/a/ (outputs[0]).
    two = (_out("d/{item}"), _out("d/a/{item}"))
    (p,) = nested_items("p", ["a", "z"], _stage(*two), "r")
    assert p.path == "p[1]"
    assert "'z' commits outputs[1] to 'd/a/z/', inside item 0 ('a')'s outputs[0]" in p.message
    # The same paths on two storages never meet.
    apart = (_out("d/{item}", "raw"), _out("d/a/{item}", "other"))
    st = PipelineRunSpec.model_validate({"stages": [stage(
        "a", forEach={"items": ["x"]}, outputs=list(apart))],
        "storage": [*S3, {"name": "other", "s3": {"bucket": "b2"}}]}).stages[0]
    assert nested_items("p", ["a", "z"], st, "r") == []


def test_run_stage_and_index_are_filled_as_the_runner_fills_them() -> None:
    # {index} sets the items apart; {run} and {stage} are the same for every item.
    assert nested_items("p", ["a", "a/b"], _stage(_out("{run}/{index}/{item}")), "r") == []
    (p,) = nested_items("p", ["a", "a/b"], _stage(_out("{run}/{stage}/{item}")), "night")
    assert "'night/a/a/b/'" in p.message


def test_no_outputs_or_no_slash_costs_nothing_and_finds_nothing() -> None:
    assert nested_items("p", ["a", "a/b"], _stage(), "r") == []
    assert nested_items("p", [f"n{i}" for i in range(1000)], _stage(_out("o/{item}")), "r") == []


def test_only_the_first_few_items_are_listed() -> None:
    items = ["a", *[f"a/{i}" for i in range(8)]]
    # Two outputs: still one problem per item.
    found = nested_items("p", items, _stage(_out("o/{item}"), _out("p/{item}")), "r")
    assert [p.path for p in found[:5]] == [f"p[{i}]" for i in range(1, 6)]
    assert found[-1].message == "3 more items have an output prefix inside another item's"
    assert all(p.ratchet for p in found)


def test_check_items_runs_it_for_inline_and_read_items() -> None:
    st = _stage(_out("o/{item}"))
    assert [p.path for p in check_items("s.items", ["a", "a/b"], st, "r")] == ["s.items[1]"]
    # Other item problems first: the nesting check waits until the items are sound.
    assert [p.path for p in check_items("s.items", ["a", "a/b", ""], st, "r")] == \
        ["s.items[2]"]


def test_two_items_with_the_very_same_prefix_from_two_outputs() -> None:
    st = _stage(_out("x/{item}"), _out("x/{item}/logs"))
    found = {p.path: p.message for p in nested_items("p", ["b", "a/logs", "a"], st, "r")}
    # One problem per item, for its first output that clashes, naming the nearest
    # prefix of another item: a/logs's x/a/logs/ lies in a's x/a/, and a's x/a/logs/
    # is a/logs's very prefix.
    assert sorted(found) == ["p[1]", "p[2]"]
    assert "'a/logs' commits outputs[0] to 'x/a/logs/', inside item 2 ('a')'s outputs[0] " \
        "prefix" in found["p[1]"]
    assert "'a' commits outputs[1] to 'x/a/logs/', the same prefix as item 1 ('a/logs')'s " \
        "outputs[0] prefix" in found["p[2]"]
