"""A stage that reads its own output prefix keeps its input on a retry; another pod's
delete that empties a folder does not fail a put into it (items a and a/b); a manifest
committed at a storage's root is read under another prefix."""
from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import DirStore, ObjectInfo
from tests.unit.runner_s3 import bucket, config, staged, stores, write
from tests.unit.test_containment import make_world, runner_cfg

N1 = Item("n1", 0, 0)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


# --- 3. a stage whose input is (or holds) its own output prefix ----------------------------

def test_retry_of_a_stage_that_reads_its_own_output_prefix_still_has_its_input(
        s3: Any, tmp_path: Path) -> None:
    """Raw data at cal/n1/; the stage reads it and writes its results next to it
    (input and output path cal/{item}/; nothing refuses it). Attempt 1's step fails."""
    s3.put_object(Bucket="runner-bucket", Key="proj/cal/n1/f.txt", Body=b"raw")
    cfg = config([{"storage": "data", "path": "cal/{item}/", "cache": False}],
                 [{"storage": "data", "path": "cal/{item}/"}])
    p1 = Paths(tmp_path / "a1")
    stage_in(cfg, p1, N1, stores(cfg, s3))
    assert staged(p1) == ["f.txt"]
    c1 = Committer(cfg, p1, N1, 1, stores(cfg, s3))
    c1.prepare()                   # commit sidecar, pod start
    assert c1.commit_failure().ok  # the step exits 3
    p2 = Paths(tmp_path / "a2")    # retries.perItem: attempt 2
    stage_in(cfg, p2, N1, stores(cfg, s3))  # HEAD: FileNotFoundError (exit 66)
    assert staged(p2) == ["f.txt"]


# --- 4. DirStore.delete's rmdir and another pod's put into that folder ---------------------

def test_an_emptied_folder_is_not_removed_under_another_pods_upload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Items a and a/b (the documented nested case, which the manifests keep apart):
    a's rerun no longer writes b/sub/old.txt; a/b writes sub/new.txt into that folder."""
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [], [{"storage": "data", "path": "out/{item}/"}])
    st: dict[str, S3Store | DirStore] = {"data": DirStore("data", world / "pvc")}
    item_a, item_ab = Item("a", 0, 0), Item("a/b", 1, 1)
    p = Paths(tmp_path / "a1")
    c = Committer(cfg, p, item_a, 1, st)
    c.prepare()
    write(p.outputs, "b/sub/old.txt", b"old")
    write(p.outputs, "x.txt", b"x")
    assert c.commit_success().ok
    # the rerun of item a (pod 1) and item a/b (pod 2), committing at the same moment
    pa = Paths(tmp_path / "a2")
    ca = Committer(cfg, pa, item_a, 2, st)
    ca.prepare()
    write(pa.outputs, "x.txt", b"x")
    pb = Paths(tmp_path / "ab1")
    cb = Committer(cfg, pb, item_ab, 1, st)
    cb.prepare()
    write(pb.outputs, "sub/new.txt", b"new")
    real_copy = shutil.copyfile
    ran: list[int] = []

    def copy_after_pod1_settles(src: Any, dst: Any, *a: Any, **k: Any) -> Any:
        # pod 2 has made out/a/b/sub/ (mkdir) and is about to write its temp file;
        # pod 1 runs its _settle in that moment
        if not ran:
            ran.append(1)
            ca._settle(ca.outputs[0])
        return real_copy(src, dst, *a, **k)

    monkeypatch.setattr(shutil, "copyfile", copy_after_pod1_settles)
    res = cb.commit_success()  # not ok: the item would exit 75
    assert res.ok


# --- 5. a manifest committed at a storage's root (prefix "") read under another prefix -----

def test_a_root_manifest_is_rebased_like_any_other(tmp_path: Path) -> None:
    from nightshift.runner.manifest import parse
    doc = {"version": 1, "prefix": "", "files": [{"key": "x.txt", "size": 1, "sha256": "0" * 64}]}
    # the same files reached through another storage prefix ("a storage with another prefix")
    got: list[ObjectInfo] | None = parse(json.dumps(doc).encode(), "vol/", "s3://b/vol/_SUCCESS")
    assert got is not None and [o.key for o in got] == ["vol/x.txt"]
