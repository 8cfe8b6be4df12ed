"""An attempt marks its output prefix before it uploads into it (runner/commit.py, step 2).

Until session 48 only a prefix that had held a manifest was marked: files a first
attempt uploaded before its pod was lost stayed under P unmarked, read as raw data by a
parent-prefix or optional consumer when no later attempt committed the item, and left
under P beside the manifest when one did (docs/data-placement.md).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.commit import Committer, safe
from nightshift.runner.config import Item, Paths, RunnerConfig
from nightshift.runner.stagein import stage_in
from tests.unit.runner_s3 import BUCKET, bucket, config, get_json, keys, staged, stores, write

A, B = Item("a", 0, 0), Item("b", 1, 1)
N1 = Item("n1", 0, 0)
WITHDRAWN = "_SUCCESS.withdrawn"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def up(mode: str = "interleave", inputs: list[dict[str, Any]] | None = None) -> RunnerConfig:
    return config(inputs or [], [{"storage": "data", "path": "out/{item}/", "mode": mode}],
                  stage="up")


def attempt(cfg: RunnerConfig, s3: Any, tmp: Path, item: Item, n: int,
            files: dict[str, bytes]) -> Committer:
    """Attempt n of `item`, prepared at pod start, its step having written `files`."""
    paths = Paths(tmp / f"{item.value}-{n}")
    c = Committer(cfg, paths, item, n, stores(cfg, s3))
    c.prepare()
    for rel, data in files.items():
        write(paths.outputs, rel, data, settled=True)
    return c


def interleaved_then_lost(c: Committer) -> None:
    c.interleave(set())
    c.interleave(set())  # seen settled twice: uploaded; then the node is lost


def test_what_a_lost_first_attempt_uploaded_reaches_no_consumer(s3: Any, tmp_path: Path) -> None:
    cfg = up()
    assert attempt(cfg, s3, tmp_path, A, 1, {"x.txt": b"a's"}).commit_success().ok
    interleaved_then_lost(attempt(cfg, s3, tmp_path, B, 1, {"part.txt": b"half of b"}))
    assert get_json(s3, f"proj/out/b/{WITHDRAWN}") == {"keys": ["proj/out/b/part.txt"]}
    # b is never committed (its retries fail elsewhere, within tolerateFailedItems).
    parent = config([{"storage": "data", "path": "out/", "cache": False}], [], stage="down")
    paths = Paths(tmp_path / "parent")
    stage_in(parent, paths, N1, stores(parent, s3))
    assert staged(paths) == ["a/_SUCCESS", "a/x.txt"]
    optional = config([{"storage": "data", "path": "out/{item}/", "cache": False,
                        "optional": True}], [], stage="down")
    paths = Paths(tmp_path / "optional")
    stage_in(optional, paths, B, stores(optional, s3))
    assert staged(paths) == []


def test_the_next_commit_takes_back_what_a_lost_attempt_uploaded(s3: Any,
                                                                  tmp_path: Path) -> None:
    cfg = up(mode="batch")
    lost = attempt(cfg, s3, tmp_path, N1, 1, {"a.txt": b"a", "b.txt": b"b"})
    for out in lost.outputs:
        lost._settle(out)  # the sidecar killed after the uploads, before the manifest
    assert keys(s3, "proj/out/n1/") == {"proj/out/n1/a.txt", "proj/out/n1/b.txt",
                                        f"proj/out/n1/{WITHDRAWN}"}
    assert attempt(cfg, s3, tmp_path, N1, 2, {"a.txt": b"a again"}).commit_success().ok
    assert keys(s3, "proj/out/n1/") == {"proj/out/n1/_SUCCESS", "proj/out/n1/a.txt"}


def test_the_marker_is_written_before_the_first_upload_with_every_key(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    put_file, put_bytes = S3Store.put_file, S3Store.put_bytes

    def file_(self: S3Store, path: Path, key: str, sha256: str) -> Any:
        calls.append(f"file {key}")
        return put_file(self, path, key, sha256)

    def bytes_(self: S3Store, key: str, data: bytes, content_type: str = "") -> None:
        calls.append(f"bytes {key} {json.loads(data).get('keys', '')}")
        put_bytes(self, key, data)

    monkeypatch.setattr(S3Store, "put_file", file_)
    monkeypatch.setattr(S3Store, "put_bytes", bytes_)
    c = attempt(up(mode="batch"), s3, tmp_path, N1, 1, {"a.txt": b"a", "b/c.txt": b"c"})
    assert c.commit_success().ok
    assert calls[0] == f"bytes proj/out/n1/{WITHDRAWN} ['proj/out/n1/a.txt', 'proj/out/n1/b/c.txt']"
    assert sorted(calls[1:3]) == ["file proj/out/n1/a.txt", "file proj/out/n1/b/c.txt"]
    assert calls[3] == "bytes proj/out/n1/_SUCCESS "
    assert keys(s3, "proj/out/n1/") == {"proj/out/n1/_SUCCESS", "proj/out/n1/a.txt",
                                        "proj/out/n1/b/c.txt"}


def test_a_failed_attempt_leaves_a_fresh_prefix_as_it_found_it(s3: Any, tmp_path: Path) -> None:
    c = attempt(up(), s3, tmp_path, N1, 1, {"part.txt": b"p"})
    c.interleave(set())
    c.interleave(set())
    assert f"proj/out/n1/{WITHDRAWN}" in keys(s3, "proj/out/n1/")
    assert c.commit_failure().ok  # the step failed: the sidecar takes it all back
    assert keys(s3, "proj/out/n1/") == set()


def test_an_upload_whose_answer_was_lost_is_taken_back_with_the_rest(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put_file = S3Store.put_file

    def landed_but_refused(self: S3Store, path: Path, key: str, sha256: str) -> Any:
        put_file(self, path, key, sha256)
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(S3Store, "put_file", landed_but_refused)
    res = safe(attempt(up(mode="batch"), s3, tmp_path, N1, 1, {"a.txt": b"a"}).commit_success,
               "commit")
    assert not res.ok
    assert keys(s3, "proj/out/n1/") == set()


def test_a_stage_that_reads_its_own_output_prefix_reads_it_through_its_own_marker(
        s3: Any, tmp_path: Path) -> None:
    """It stages P, then rewrites it. The marker keeps P's files from other consumers,
    but the item's own retry must still find its input: before, a marker there (a
    re-run over committed outputs, withdrawn, then failed) made it read nothing and fail
    for good with exit 66."""
    s3.put_object(Bucket=BUCKET, Key="proj/out/n1/raw.dat", Body=b"raw")
    cfg = up(inputs=[{"storage": "data", "path": "out/{item}/", "cache": False}])
    interleaved_then_lost(attempt(cfg, s3, tmp_path, N1, 1, {"cooked.dat": b"c"}))
    assert keys(s3, "proj/out/n1/") == {"proj/out/n1/raw.dat", "proj/out/n1/cooked.dat",
                                        f"proj/out/n1/{WITHDRAWN}"}
    paths = Paths(tmp_path / "retry")
    stage_in(cfg, paths, N1, stores(cfg, s3))
    assert staged(paths) == ["cooked.dat", "raw.dat"]
    # Committed, then a re-run's attempt withdraws the manifest and fails: the next
    # attempt reads P as it is, neither manifest nor marker among its inputs.
    assert attempt(cfg, s3, tmp_path, N1, 2, {"cooked.dat": b"c2"}).commit_success().ok
    rerun = attempt(cfg, s3, tmp_path, N1, 3, {})
    assert rerun.commit_failure().ok
    assert f"proj/out/n1/{WITHDRAWN}" in keys(s3, "proj/out/n1/")
    paths = Paths(tmp_path / "after-rerun")
    stage_in(cfg, paths, N1, stores(cfg, s3))
    assert staged(paths) == ["cooked.dat", "raw.dat"]
    # Any other consumer of P: withdrawn, nothing counts.
    other = config([{"storage": "data", "path": "out/n1/", "cache": False, "optional": True}],
                   [], stage="down")
    paths = Paths(tmp_path / "other")
    stage_in(other, paths, N1, stores(other, s3))
    assert staged(paths) == []
