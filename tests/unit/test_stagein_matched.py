"""An input that matches no file fails the item at stage-in (exit 66) naming the input,
unless it is optional; a gathered input only when none of its gathered items has any
(a gathered item that failed left no output). On a volume store; against a real S3
server: tests/integration/test_runner_s3.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.config import Item, Paths
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import DirStore
from tests.unit.test_containment import make_world, runner_cfg, write_gathered


def stores(world: Path) -> dict[str, S3Store | DirStore]:
    return {"data": DirStore("data", world / "pvc")}


def test_a_prefix_that_matches_nothing_fails_naming_the_input(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [{"storage": "data", "path": "raw/a/"},
                             {"storage": "data", "path": "raw/{item}/"}], [])
    with pytest.raises(FileNotFoundError) as err:
        stage_in(cfg, Paths(world / "pod"), Item("night-9", 0, 0), stores(world))
    assert str(err.value) == (
        f"inputs[1].path 'raw/{{item}}/' matched no file in storage 'data' "
        f"({world}/pvc/proj/raw/night-9/): check the path and that the data is there, or "
        "set inputs[1].optional: true when an item may have no input")


def test_a_single_file_that_is_not_there_fails_the_same_way(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [{"storage": "data", "path": "raw/{item}/f.txt"}], [])
    stage_in(cfg, Paths(world / "pod-a"), Item("a", 0, 0), stores(world))
    with pytest.raises(FileNotFoundError, match=r"inputs\[0\]\.path 'raw/\{item\}/f.txt' "
                       "matched no file"):
        stage_in(cfg, Paths(world / "pod-b"), Item("b", 0, 0), stores(world))


def test_an_optional_input_that_matches_nothing_stages_nothing(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [{"storage": "data", "path": "raw/{item}/", "optional": True},
                             {"storage": "data", "path": "raw/{item}/f.txt",
                              "optional": True, "localPath": "one"}], [])
    paths = Paths(world / "pod")
    stats = stage_in(cfg, paths, Item("night-9", 0, 0), stores(world))
    assert stats.files == 0


def test_a_gathered_input_fails_only_when_no_gathered_item_has_data(tmp_path: Path) -> None:
    world = make_world(tmp_path)  # raw/a/ has a file; raw/b/ and raw/c/ have none
    cfg = runner_cfg(world, [{"storage": "data", "path": "raw/{gather}/", "gather": "split",
                              "localPath": "bands"}], [])
    paths = Paths(world / "pod")
    write_gathered(paths, ["a", "b"])  # b failed upstream: it left nothing
    stage_in(cfg, paths, Item("x", 0, 0), stores(world))
    assert (paths.inputs / "bands" / "a" / "f.txt").read_text() == "mine"
    other = Paths(world / "pod2")
    write_gathered(other, ["b", "c"])
    with pytest.raises(FileNotFoundError) as err:
        stage_in(cfg, other, Item("x", 0, 0), stores(world))
    assert str(err.value).startswith(
        "inputs[0].path 'raw/{gather}/' matched no file in storage 'data' for any of the 2 "
        f"items of 'split' it gathers (first: {world}/pvc/proj/raw/b/)"), err.value


def test_a_volume_that_refuses_the_pods_user_names_the_input_and_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nightshift.runner.stagein import InputStorageError

    world = make_world(tmp_path)
    cfg = runner_cfg(world, [{"storage": "data", "path": "raw/a/"}], [])

    def refused(self: DirStore, prefix: str) -> list[object]:
        raise PermissionError(13, "Permission denied", "/nightshift/storage/data/proj/raw/a")

    # The tests run as root, whom a mode does not stop: the store refuses instead.
    monkeypatch.setattr(DirStore, "ls", refused)
    with pytest.raises(InputStorageError) as err:
        stage_in(cfg, Paths(world / "pod"), Item("a", 0, 0), stores(world))
    said = str(err.value)
    assert said.startswith("inputs[0] (data: "), said
    assert "Permission denied" in said and "runAsUser and runAsGroup to its owner" in said
