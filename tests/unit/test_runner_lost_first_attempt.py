"""A first attempt (no earlier manifest) that interleaves and is lost leaves P with files
and neither _SUCCESS nor _SUCCESS.withdrawn; when the item then fails, a consumer stages
the lost attempt's partial files as input (raw data)."""
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths
from nightshift.runner.stagein import stage_in
from tests.unit.runner_s3 import bucket, config, keys, stores, write

ITEM = Item("n1", 0, 0)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def staged(paths: Paths) -> list[str]:
    return sorted(p.relative_to(paths.inputs).as_posix()
                  for p in paths.inputs.rglob("*") if p.is_file())


def test_failed_item_after_lost_first_attempt_leaves_no_input(s3: Any, tmp_path: Path) -> None:
    up = config([], [{"storage": "data", "path": "out/{item}/", "mode": "interleave"}],
                stage="up")
    lost = Paths(tmp_path / "lost")
    c1 = Committer(up, lost, ITEM, 1, stores(up, s3))
    c1.prepare()
    write(lost.outputs, "part-1.txt", b"half of a result", settled=True)
    c1.interleave(set())
    c1.interleave(set())  # uploaded; then the spot node is reclaimed
    # attempt 2: its step fails before writing anything
    c2 = Committer(up, Paths(tmp_path / "a2"), ITEM, 2, stores(up, s3))
    c2.prepare()
    assert c2.commit_failure().ok
    print("P holds:", sorted(keys(s3, "proj/out/n1/")))
    # the item has failed (tolerateFailedItems); a gathering / optional consumer:
    down = config([{"storage": "data", "path": "out/{item}/", "cache": False,
                    "optional": True}], [], stage="down")
    paths = Paths(tmp_path / "down")
    stats = stage_in(down, paths, ITEM, stores(down, s3))
    assert staged(paths) == [], f"a failed item's uncommitted files staged: {staged(paths)}"
    assert stats.files == 0
