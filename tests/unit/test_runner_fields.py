"""The runner's side of #12: matrix fields from the env, {placeholders} in paths, and the
gathered stage's list read across its chunk ConfigMaps."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.api import names
from nightshift.api.itemfields import expand
from nightshift.api.itemlookup import DataVolume, Item, all_lines
from nightshift.api.runnerwire import ConfigError
from nightshift.pipelinerun import items as render_items
from nightshift.runner.config import Paths, RunnerConfig, fill_template, resolve_item

CFG = RunnerConfig(run="bb", namespace="ns", stage="sim", storages={})
PATHS = Paths(Path("/nonexistent"))


def test_item_and_fields_from_the_env() -> None:
    item = resolve_item(PATHS, {names.ENV_ITEM: "LAX/northridge", names.ENV_ITEM_INDEX: "7",
                                names.ENV_COMPLETION_INDEX: "2",
                                names.ENV_ITEM_FIELDS: "site source"})
    assert item == Item("LAX/northridge", 7, 2, (("site", "LAX"), ("source", "northridge")))


@pytest.mark.parametrize(("fields", "why"), [("site", "1 fields"), ("a b c", "3 fields"),
                                             ("Site source", "not a field name")])
def test_fields_that_do_not_fit_the_item_stop_the_runner(fields: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        resolve_item(PATHS, {names.ENV_ITEM: "LAX/northridge", names.ENV_COMPLETION_INDEX: "0",
                             names.ENV_ITEM_FIELDS: fields})


def test_fill_template_fields_gather_and_the_rest() -> None:
    item = Item("LAX/northridge", 7, 2, (("site", "LAX"), ("source", "northridge")))
    assert fill_template("{run}/{stage}/{source}/{site}/{index}/{item}/{x}/{}", CFG, item) == \
        "bb/sim/northridge/LAX/7/LAX/northridge/{x}/{}"
    assert fill_template("split/{gather}/band-{item}", CFG, Item("003", 2, 2), "day-07") == \
        "split/day-07/band-003"
    # {gather} means nothing to an input that does not gather.
    assert fill_template("split/{gather}/", CFG, Item("003", 2, 2)) == "split/{gather}/"


def test_a_value_is_never_expanded_twice() -> None:
    # The old replace chain turned an item "{index}" into the index.
    assert fill_template("out/{item}/", CFG, Item("{index}", 5, 5)) == "out/{index}/"
    assert expand("{a}{b}", {"a": "{b}", "b": "x"}) == "{b}x"


def test_all_lines_reads_chunks_in_index_order() -> None:
    values = [f"day-{i:02d}" for i in range(42)]
    cms = render_items.items_configmaps(render_items.RunRef("r", "ns", "u"), "split", values,
                                        budget=40, last_step="main")
    assert len(cms) > 5
    data = {k: v for cm in cms for k, v in cm["data"].items()}
    assert all_lines(DataVolume(data)) == values
    # A chunk missing in the middle is an error, never a shorter list.
    del data[next(k for k in sorted(data) if k.startswith("items.") and k != "items")]
    with pytest.raises(ConfigError, match="a chunk ConfigMap is missing"):
        all_lines(DataVolume(data))
