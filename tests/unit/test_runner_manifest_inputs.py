"""An upstream Nightshift output is read through its `_SUCCESS` manifest, and a lost
attempt cannot leave keys the next stage stages as its inputs.

Found by an audit: stage-in listed the whole prefix, so a file a lost attempt had
interleaved (in no manifest) reached the next stage; and a pod lost after withdrawing
the previous manifest took that manifest's key list with it, so its keys stayed for good.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths, RunnerConfig
from nightshift.runner.manifest import ManifestError
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import DirStore
from tests.unit.runner_s3 import BUCKET, bucket, config, keys, staged, stores, write

ITEM = Item("n1", 0, 0)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def downstream() -> RunnerConfig:
    return config([{"storage": "data", "path": "out/{item}/", "cache": False}], [],
                  stage="down")


def test_a_lost_attempts_interleaved_file_is_not_staged_downstream(s3: Any,
                                                                   tmp_path: Path) -> None:
    up = config([], [{"storage": "data", "path": "out/{item}/", "mode": "interleave"}],
                stage="up")
    lost = Paths(tmp_path / "lost")
    c1 = Committer(up, lost, ITEM, 1, stores(up, s3))
    c1.prepare()
    write(lost.outputs, "part-1.txt", b"from the lost attempt", settled=True)
    c1.interleave(set())
    c1.interleave(set())  # seen settled twice: uploaded; then the node is lost
    # Listed in the marker before its upload: the next commit knows to take it back.
    assert keys(s3, "proj/out/n1/") == {"proj/out/n1/part-1.txt",
                                        "proj/out/n1/_SUCCESS.withdrawn"}
    retry = Paths(tmp_path / "retry")
    c2 = Committer(up, retry, ITEM, 2, stores(up, s3))
    c2.prepare()
    write(retry.outputs, "part-2.txt", b"the real output")
    assert c2.commit_success().ok
    assert keys(s3, "proj/out/n1/") == {"proj/out/n1/_SUCCESS", "proj/out/n1/part-2.txt"}
    paths = Paths(tmp_path / "down")
    stats = stage_in(downstream(), paths, ITEM, stores(downstream(), s3))
    assert staged(paths) == ["_SUCCESS", "part-2.txt"]
    assert (paths.inputs / "part-2.txt").read_bytes() == b"the real output"
    assert stats.files == 2 and stats.verified == {"sha256": 2, "md5": 0, "size": 0}


def test_keys_of_a_manifest_a_lost_pod_withdrew_are_deleted_by_the_next_commit(
        s3: Any, tmp_path: Path) -> None:
    up = config([], [{"storage": "data", "path": "out/{item}/"}], stage="up")
    first = Paths(tmp_path / "a1")
    c1 = Committer(up, first, ITEM, 1, stores(up, s3))
    c1.prepare()
    write(first.outputs, "a.txt", b"a")
    write(first.outputs, "b.txt", b"b")
    assert c1.commit_success().ok
    # The next attempt's sidecar withdraws the manifest at its start; its pod is lost.
    Committer(up, Paths(tmp_path / "lost"), ITEM, 2, stores(up, s3)).prepare()
    assert "proj/out/n1/_SUCCESS" not in keys(s3, "proj/out/n1/")
    third = Paths(tmp_path / "a3")
    c3 = Committer(up, third, ITEM, 3, stores(up, s3))
    c3.prepare()
    write(third.outputs, "a.txt", b"a again")
    assert c3.commit_success().ok
    assert keys(s3, "proj/out/") == {"proj/out/n1/a.txt", "proj/out/n1/_SUCCESS"}


def test_another_items_keys_under_the_prefix_are_never_deleted(s3: Any,
                                                               tmp_path: Path) -> None:
    # Item "a/b"'s prefix lies under item "a"'s: only keys a manifest of a/ listed go.
    up = config([], [{"storage": "data", "path": "out/{item}/"}], stage="up")
    for n, (value, name) in enumerate([("a", "x.txt"), ("a/b", "y.txt"), ("a", "z.txt")]):
        paths = Paths(tmp_path / f"pod{n}")
        com = Committer(up, paths, Item(value, 0, 0), n + 1, stores(up, s3))
        com.prepare()
        write(paths.outputs, name, b"data")
        assert com.commit_success().ok
    assert keys(s3, "proj/out/") == {"proj/out/a/z.txt", "proj/out/a/_SUCCESS",
                                     "proj/out/a/b/y.txt", "proj/out/a/b/_SUCCESS"}


def test_a_pvc_output_is_read_through_its_manifest_too(tmp_path: Path) -> None:
    vol = tmp_path / "pvc"
    raw: dict[str, Any] = {
        "version": 1, "run": "r", "namespace": "ns", "stage": "s",
        "storages": {"data": {"kind": "dir", "path": str(vol), "prefix": "proj/"}},
        "inputs": [{"storage": "data", "path": "out/{item}/"}],
        "outputs": [{"storage": "data", "path": "out/{item}/"}]}
    cfg = RunnerConfig.loads(json.dumps(raw))
    store: dict[str, Any] = {"data": DirStore("data", vol)}
    write(vol, "proj/out/n1/left-by-a-lost-attempt.txt", b"stale")
    up = Paths(tmp_path / "up")
    com = Committer(cfg, up, ITEM, 1, store)
    com.prepare()
    write(up.outputs, "cube.fits", b"cube")
    assert com.commit_success().ok
    # The next stage (no output there: the same stage reading its own prefix reads it raw).
    down = RunnerConfig.loads(json.dumps({**raw, "stage": "down", "outputs": []}))
    paths = Paths(tmp_path / "down")
    stats = stage_in(down, paths, ITEM, store)
    assert staged(paths) == ["_SUCCESS", "cube.fits"] and stats.files == 2


def test_another_tools_success_marker_leaves_the_prefix_raw_data(s3: Any,
                                                                 tmp_path: Path) -> None:
    # Spark and Hadoop write an empty _SUCCESS: not a manifest, so the prefix is listed.
    for key, body in (("proj/out/n1/_SUCCESS", b""), ("proj/out/n1/part-0.parquet", b"p0"),
                      ("proj/out/n1/sub/part-1.parquet", b"p1")):
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    paths = Paths(tmp_path / "down")
    stats = stage_in(downstream(), paths, ITEM, stores(downstream(), s3))
    assert staged(paths) == ["_SUCCESS", "part-0.parquet", "sub/part-1.parquet"]
    assert stats.files == 3


@pytest.mark.parametrize("damage", ["deleted", "rewritten"])
def test_a_listed_file_that_is_not_what_was_committed_fails_stage_in(
        s3: Any, tmp_path: Path, damage: str) -> None:
    body = b"committed"
    s3.put_object(Bucket=BUCKET, Key="proj/out/n1/x.txt",
                  Body=body if damage == "deleted" else b"written again")
    if damage == "deleted":
        s3.delete_object(Bucket=BUCKET, Key="proj/out/n1/x.txt")
    manifest = {"version": 1, "files": [{"key": "proj/out/n1/x.txt", "size": len(body),
                                         "sha256": hashlib.sha256(body).hexdigest()}]}
    s3.put_object(Bucket=BUCKET, Key="proj/out/n1/_SUCCESS", Body=json.dumps(manifest))
    with pytest.raises(ManifestError, match=(
            rf"s3://{BUCKET}/proj/out/n1/_SUCCESS lists s3://{BUCKET}/proj/out/n1/x.txt.*"
            "commit the upstream item again")):
        stage_in(downstream(), Paths(tmp_path / "down"), ITEM, stores(downstream(), s3))


def test_an_output_withdrawn_and_never_committed_again_is_no_input(s3: Any,
                                                                   tmp_path: Path) -> None:
    # Its last commit's files are still there, and a withdrawn list: not raw data.
    up = config([], [{"storage": "data", "path": "out/{item}/"}], stage="up")
    first = Paths(tmp_path / "a1")
    c1 = Committer(up, first, ITEM, 1, stores(up, s3))
    c1.prepare()
    write(first.outputs, "a.txt", b"a")
    assert c1.commit_success().ok
    Committer(up, Paths(tmp_path / "lost"), ITEM, 2, stores(up, s3)).prepare()
    assert keys(s3, "proj/out/n1/") == {"proj/out/n1/a.txt", "proj/out/n1/_SUCCESS.withdrawn"}
    with pytest.raises(FileNotFoundError, match=r"inputs\[0\].path 'out/\{item\}/' matched "
                       "no file"):
        stage_in(downstream(), Paths(tmp_path / "down"), ITEM, stores(downstream(), s3))


def _dir_config(path: Path, prefix: str, inputs: list[Any], outputs: list[Any]
                ) -> RunnerConfig:
    return RunnerConfig.loads(json.dumps({
        "version": 1, "run": "r", "namespace": "ns", "stage": "s",
        "storages": {"data": {"kind": "dir", "path": str(path), "prefix": prefix}},
        "inputs": inputs, "outputs": outputs}))


def test_a_consumer_mounting_the_claim_elsewhere_reads_the_manifest_relative_to_it(
        tmp_path: Path) -> None:
    # The manifest's keys are the producer's; this stage mounts the claim with subPath proj.
    vol = tmp_path / "claim"
    up = _dir_config(vol, "proj/", [], [{"storage": "data", "path": "out/{item}/"}])
    p = Paths(tmp_path / "up")
    com = Committer(up, p, ITEM, 1, {"data": DirStore("data", vol)})
    com.prepare()
    write(p.outputs, "cube.fits", b"cube")
    assert com.commit_success().ok
    down = _dir_config(vol / "proj", "", [{"storage": "data", "path": "out/{item}/"}], [])
    paths = Paths(tmp_path / "down")
    stats = stage_in(down, paths, ITEM, {"data": DirStore("data", vol / "proj")})
    assert (paths.inputs / "cube.fits").read_bytes() == b"cube" and stats.files == 2


def test_an_older_runners_manifest_listing_a_steps_own_marker_is_still_read(
        s3: Any, tmp_path: Path) -> None:
    # Before 2026-11-30 a step's Spark/Hadoop _SUCCESS was uploaded, listed, then written
    # over by the manifest itself.
    part = b"parquet bytes"
    s3.put_object(Bucket=BUCKET, Key="proj/out/n1/part-0.parquet", Body=part,
                  Metadata={"sha256": hashlib.sha256(part).hexdigest()})
    files = [{"key": "proj/out/n1/_SUCCESS", "size": 0,
              "sha256": hashlib.sha256(b"").hexdigest()},
             {"key": "proj/out/n1/part-0.parquet", "size": len(part),
              "sha256": hashlib.sha256(part).hexdigest()}]
    manifest = {"version": 1, "run": "r", "stage": "up", "item": "n1", "index": 0,
                "attempt": 1, "committed": "2026-11-29T00:00:00Z", "storage": "data",
                "prefix": "proj/out/n1/", "files": files, "totalBytes": len(part)}
    s3.put_object(Bucket=BUCKET, Key="proj/out/n1/_SUCCESS",
                  Body=json.dumps(manifest, indent=1).encode())
    paths = Paths(tmp_path / "down")
    stage_in(downstream(), paths, ITEM, stores(downstream(), s3))
    assert staged(paths) == ["_SUCCESS", "part-0.parquet"]
    assert (paths.inputs / "part-0.parquet").read_bytes() == part
