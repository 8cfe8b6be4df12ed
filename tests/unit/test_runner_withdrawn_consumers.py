"""Consumers of a parent prefix (`out/` over every item's outputs) never get a failed
item's marker or withdrawn files, and still fail with no input when every item failed;
a mounted storage's name that changed shape commits after an attempt lost mid-commit."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths, RunnerConfig
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import DirStore
from tests.unit.runner_s3 import bucket, config, staged, stores, write
from tests.unit.test_containment import make_world, runner_cfg

A, B = Item("a", 0, 0), Item("b", 1, 1)
N1 = Item("n1", 0, 0)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


# --- 1. a consumer naming the parent prefix of all items' outputs --------------------------

UP = [{"storage": "data", "path": "out/{item}/"}]


def failed_first_attempt(cfg: RunnerConfig, s3: Any, tmp: Path, item: Item) -> None:
    """The item's only attempt: its step fails (within tolerateFailedItems)."""
    c = Committer(cfg, Paths(tmp / f"up-{item.value}"), item, 1, stores(cfg, s3))
    c.prepare()                       # the sidecar, at pod start
    assert c.commit_failure().ok      # step exit != 0


def test_parent_prefix_consumer_gets_no_marker_of_a_failed_item(s3: Any, tmp_path: Path) -> None:
    up = config([], UP, stage="up")
    ok = Committer(up, Paths(tmp_path / "up-a"), A, 1, stores(up, s3))
    ok.prepare()
    write(Paths(tmp_path / "up-a").outputs, "x.txt", b"x")
    assert ok.commit_success().ok
    failed_first_attempt(up, s3, tmp_path, B)
    down = config([{"storage": "data", "path": "out/", "cache": False}], [], stage="down")
    paths = Paths(tmp_path / "down")
    stage_in(down, paths, N1, stores(down, s3))
    # item b failed and committed nothing: nothing of it should reach the consumer
    assert "b/_SUCCESS.withdrawn" not in staged(paths), staged(paths)


def test_parent_prefix_consumer_with_every_item_failed_is_no_input(s3: Any, tmp_path: Path) -> None:
    """docs/data-placement.md 'Inputs: staging': an input that matches no file fails the
    item at stage-in, exit 66, instead of running the steps on an empty directory."""
    up = config([], UP, stage="up")
    failed_first_attempt(up, s3, tmp_path, A)
    failed_first_attempt(up, s3, tmp_path, B)
    down = config([{"storage": "data", "path": "out/", "cache": False}], [], stage="down")
    paths = Paths(tmp_path / "down")
    with pytest.raises(FileNotFoundError, match="matched no file"):
        stage_in(down, paths, N1, stores(down, s3))
        print("staged instead:", staged(paths))


# --- 2. DirStore: a stale key whose name is now a folder (or under a file) -----------------

def dir_world(tmp_path: Path) -> tuple[Path, RunnerConfig, dict[str, S3Store | DirStore]]:
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [], [{"storage": "data", "path": "out/{item}/"}])
    return world, cfg, {"data": DirStore("data", world / "pvc")}


def attempt(cfg: RunnerConfig, st: dict[str, S3Store | DirStore], tmp_path: Path, n: int,
            rel: str, data: bytes = b"data") -> Committer:
    """Attempt n of item n1, prepared, its step having written `rel`."""
    p = Paths(tmp_path / f"a{n}")
    c = Committer(cfg, p, N1, n, st)
    c.prepare()
    write(p.outputs, rel, data)
    return c


def lost_after_settle(c: Committer) -> None:
    """The commit sidecar OOM-killed (restarted by the kubelet, or the node lost) after
    _settle's uploads and before the manifest: the prefix keeps this attempt's files."""
    for out in c.outputs:
        c._settle(out)


@pytest.mark.parametrize(("before", "now"), [("plots", "plots/a.png"),
                                             ("plots/a.png", "plots")])
def test_name_changing_shape_commits_after_an_attempt_lost_mid_commit(
        tmp_path: Path, before: str, now: str) -> None:
    _, cfg, st = dir_world(tmp_path)
    assert attempt(cfg, st, tmp_path, 1, before).commit_success().ok
    lost_after_settle(attempt(cfg, st, tmp_path, 2, now))
    errors: list[str] = []
    for n in (3, 4, 5):  # retries.perItem
        try:
            assert attempt(cfg, st, tmp_path, n, now).commit_success().ok
            break
        except Exception as e:  # the sidecar's safe(): exit 75, retried
            errors.append(f"attempt {n}: {type(e).__name__}: {e}")
    assert not errors, "\n".join(errors)
