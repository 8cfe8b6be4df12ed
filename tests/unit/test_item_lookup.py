"""run.sh (in the user's container) and itemlookup.lookup (in the runner's) find the same item.

Both read the ConfigMaps the operator renders; the shell side runs in a real /bin/sh,
with sed and with the `read` loop it falls back to when an image has no sed.
"""

from __future__ import annotations

import itertools
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nightshift.api import itemfields, itemlookup, names
from nightshift.api.itemlookup import DataVolume, DirVolume, Item, lookup
from nightshift.api.runnerwire import ConfigError
from nightshift.pipelinerun import items as render_items
from nightshift.pipelinerun.spec import ForEach
from nightshift.runner.config import Paths, resolve_item

RUN = render_items.RunRef(name="r", namespace="ns", uid="u")
NO_SED_PATH = "/nonexistent"  # run.sh needs only builtins then; the step is an absolute path


def _materialize(tmp: Path, configmaps: list[dict[str, Any]]) -> Path:
    """What the projected items volume looks like inside a pod."""
    d = tmp / "items"
    d.mkdir(exist_ok=True)
    for cm in configmaps:
        for key, value in cm["data"].items():
            (d / key).write_text(value, encoding="utf-8")
    return d


def _merged(configmaps: list[dict[str, Any]]) -> dict[str, str]:
    return {k: v for cm in configmaps for k, v in cm["data"].items()}


def _run_sh_all(folder: Path, out: Path, indexes: range, sed: bool = True,
                fields: tuple[str, ...] = ()) -> dict[int, Item | None]:
    """run.sh's answer for each completion index, in one shell (None: it exited 2).

    The step prints the index, the item and each matrix field's env var, NUL-separated
    (items hold anything but NUL and line breaks)."""
    env_names = "".join(f' "${itemfields.field_env(f)}"' for f in fields)
    step = f'printf "%s\\0" "$NIGHTSHIFT_ITEM_INDEX" "$NIGHTSHIFT_ITEM"{env_names} > "$0"'
    loop = (f'for ci in {" ".join(map(str, indexes))}; do '
            f'{names.ENV_COMPLETION_INDEX}=$ci /bin/sh "$1/run.sh" step -- '
            f'/bin/sh -c \'{step}\' "$2/$ci" 2>"$2/$ci.err" || echo $? > "$2/$ci.rc"; done')
    env = {"PATH": "/usr/bin:/bin" if sed else NO_SED_PATH}
    if fields:
        env[names.ENV_ITEM_FIELDS] = " ".join(fields)
    subprocess.run(["/bin/sh", "-c", loop, "sh", str(folder), str(out)], env=env, check=True)
    found: dict[int, Item | None] = {}
    for ci in indexes:
        rc = out / f"{ci}.rc"
        if rc.exists():
            assert rc.read_text() == "2\n", (out / f"{ci}.err").read_text()
            found[ci] = None
            continue
        index, value, *values = (out / str(ci)).read_bytes().decode().split("\0")[:-1]
        assert len(values) == len(fields)
        found[ci] = Item(value, int(index), ci, tuple(zip(fields, values, strict=True)))
    return found


def _python(volume: itemlookup.ItemsVolume, ci: int,
            fields: tuple[str, ...] = ()) -> Item | None:
    try:
        return lookup(volume, ci, fields=fields)
    except ConfigError:
        return None


def _runner(folder: Path, ci: int, fields: tuple[str, ...] = ()) -> Item | None:
    """The runner's own entry point (env and mount handling around lookup)."""
    env = {names.ENV_COMPLETION_INDEX: str(ci),
           names.ENV_ITEMS_FILE: str(folder / names.ITEMS_KEY)}
    if fields:
        env[names.ENV_ITEM_FIELDS] = " ".join(fields)
    try:
        return resolve_item(Paths(root=folder.parent), env)
    except ConfigError:
        return None


def _agree(configmaps: list[dict[str, Any]], indexes: range,
           sed: bool = True, fields: tuple[str, ...] = ()) -> dict[int, Item | None]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = _materialize(Path(tmp), configmaps)
        (Path(tmp) / "out").mkdir()
        shell = _run_sh_all(folder, Path(tmp) / "out", indexes, sed, fields)
        for ci in indexes:
            assert _python(DirVolume(folder), ci, fields) == shell[ci], f"completion index {ci}"
            assert _runner(folder, ci, fields) == shell[ci], f"completion index {ci}"
    for ci in indexes:
        assert _python(DataVolume(_merged(configmaps)), ci, fields) == shell[ci], \
            f"completion {ci}"
    return shell


@pytest.mark.parametrize("budget", [render_items.CHUNK_BYTES, 64])
def test_first_attempt_agrees(budget: int) -> None:
    values = [f"night {i:04d} {{x}} $HOME" for i in range(40)]
    cms = render_items.items_configmaps(RUN, "s", values, budget, last_step="main")
    if budget == 64:
        assert len(cms) > 3, "the small budget should split the list into chunks"
    found = _agree(cms, range(41))
    assert found == {**{i: Item(v, i, i) for i, v in enumerate(values)}, 40: None}


def test_rerun_maps_to_original_indexes() -> None:
    values = [f"item-{i}" for i in range(30)]
    failed = [3, 17, 29]
    cms = (render_items.items_configmaps(RUN, "s", values, 50, last_step="main")
           + render_items.indexes_configmaps(RUN, "s", 1, failed, 4))
    assert len({k for cm in cms for k in cm["data"] if k.startswith(names.INDEXES_KEY)}) > 1
    found = _agree(cms, range(4))
    assert found == {0: Item("item-3", 3, 0), 1: Item("item-17", 17, 1),
                     2: Item("item-29", 29, 2), 3: None}


def test_chunk_keys_round_trip_and_sort_numerically() -> None:
    starts = [0, 9, 10, 99, 100, 12345, 499_999]
    keys = [itemlookup.chunk_key(names.ITEMS_KEY, s) for s in starts]
    assert [itemlookup.chunk_start(k, names.ITEMS_KEY) for k in keys] == starts
    # run.sh walks the chunks in glob (byte) order and stops at the first one past n.
    assert sorted(keys[1:]) == keys[1:]
    assert itemlookup.chunk_start("items.x", names.ITEMS_KEY) is None
    assert itemlookup.chunk_start(names.INDEXES_KEY, names.ITEMS_KEY) is None


def test_run_sh_is_built_from_the_wire_constants() -> None:
    assert itemlookup.SH_LOOKUP in render_items.RUN_SH
    for name in (names.ENV_COMPLETION_INDEX, names.INDEXES_KEY, names.ENV_ITEM,
                 names.ENV_ITEM_INDEX, names.STEP_BINARY):
        assert name in render_items.RUN_SH
    assert f'"$dir/$1"{itemlookup.CHUNK_SEP}*' in itemlookup.SH_LOOKUP


# Items as the validator lets them through: no line breaks or NULs, at most 1 KiB; shell
# metacharacters, leading dashes, blanks and non-ASCII text are all fair game.
ITEM = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\n\r\0"),
    min_size=1, max_size=12,
).filter(lambda s: render_items.item_problem(s) is None) | st.sampled_from(
    ["-n", "$HOME", "a b", " lead", "trail ", "\\", "'q'", '"', "*", "{item}", "%s", "é"])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=st.lists(ITEM, min_size=1, max_size=25),
       budget=st.integers(min_value=1, max_value=120),
       rerun=st.booleans(), sed=st.booleans(), data=st.data())
def test_shell_and_python_agree_on_any_layout(values: list[str], budget: int, rerun: bool,
                                              sed: bool, data: st.DataObject) -> None:
    cms = render_items.items_configmaps(RUN, "s", values, budget, last_step="main")
    expected = {i: Item(v, i, i) for i, v in enumerate(values)}
    if rerun:
        failed = data.draw(st.lists(st.integers(0, len(values) - 1), min_size=1,
                                     max_size=len(values), unique=True), label="failed")
        cms += render_items.indexes_configmaps(
            RUN, "s", 1, failed, data.draw(st.integers(1, 20), label="index budget"))
        expected = {ci: Item(values[orig], orig, ci) for ci, orig in enumerate(failed)}
    # One completion index past the end: both sides must refuse it.
    found = _agree(cms, range(len(expected) + 1), sed)
    assert found == {**expected, len(expected): None}


# Matrix values as the validator lets them through: no "/", tab or line break, not "."
# or "..", anything else (blanks, quotes, $(...), backticks, globs, leading dashes).
VALUE = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="/\t\n\r\0"),
    min_size=1, max_size=6,
).filter(lambda s: s not in (".", "..")) | st.sampled_from(
    ["-n", "$(id)", "`id`", "a b", "*", "{item}", "{site}", "'", '"', "\\"])
FIELD = st.from_regex(r"\A[a-z][a-z0-9_]{0,6}\Z").filter(
    lambda f: f not in itemfields.RESERVED_FIELDS)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(matrix=st.dictionaries(FIELD, st.lists(VALUE, min_size=1, max_size=3, unique=True),
                              min_size=1, max_size=3),
       budget=st.integers(min_value=8, max_value=200), sed=st.booleans(),
       rerun=st.booleans(), data=st.data())
def test_matrix_fields_agree(matrix: dict[str, list[str]], budget: int, sed: bool,
                             rerun: bool, data: st.DataObject) -> None:
    fe = ForEach.model_validate({"matrix": matrix})
    fields = render_items.matrix_fields(fe)
    values = render_items.item_list(fe)
    cms = render_items.items_configmaps(RUN, "s", values, budget, last_step="main")
    if rerun:
        # A retry Job: its completion indexes map to the original items, fields and all.
        failed = data.draw(st.lists(st.integers(0, len(values) - 1), min_size=1,
                                     max_size=len(values), unique=True), label="failed")
        cms += render_items.indexes_configmaps(RUN, "s", 1, failed, 8)
        found = _agree(cms, range(len(failed) + 1), sed, fields)
        assert [f.index for f in found.values() if f] == failed
        assert [f.value for f in found.values() if f] == [values[i] for i in failed]
        return
    found = _agree(cms, range(len(values) + 1), sed, fields)
    # Field by field, exactly the product's values, the first field slowest.
    combos = [tuple(dict(item.fields).values()) for item in found.values() if item]
    assert combos == list(itertools.product(*(matrix[f] for f in fields)))
    assert found[len(values)] is None


def test_matrix_fields_sorted_and_env_names() -> None:
    fe = ForEach.model_validate({"matrix": {"source": ["northridge", "loma"],
                                            "site": ["LAX", "SF"]}})
    assert render_items.matrix_fields(fe) == ("site", "source")
    assert render_items.item_list(fe) == ["LAX/northridge", "LAX/loma", "SF/northridge",
                                          "SF/loma"]
    assert itemfields.field_env("site") == "NIGHTSHIFT_ITEM_SITE"


@pytest.mark.parametrize("value", ["a", "a/b/c"])
def test_an_item_that_does_not_split_fails_both_sides(value: str) -> None:
    cms = render_items.items_configmaps(RUN, "s", [value], last_step="main")
    found = _agree(cms, range(1), True, ("x", "y"))
    assert found == {0: None}


def test_an_empty_part_is_an_empty_field_on_both_sides() -> None:
    # The validator refuses empty matrix values; should one reach a pod, both agree.
    found = _agree(render_items.items_configmaps(RUN, "s", ["a/"], last_step="main"), range(1),
                   True, ("x", "y"))
    assert found == {0: Item("a/", 0, 0, (("x", "a"), ("y", "")))}
