"""A node-cache entry is keyed by the SHA-256 a manifest lists: an object rewritten after
the commit (same size, a new ETag) that another input cached is not staged through the
manifest from the cache; with or without the cache it fails the checksum (exit 65)."""
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import ChecksumError
from tests.unit.runner_s3 import BUCKET, bucket, config, stores, write

ITEM = Item("n1", 0, 0)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def _committed_then_rewritten(s3: Any, tmp_path: Path) -> None:
    """n1's cube.txt committed as A..., then written again as B... of the same size (a
    zombie attempt on a partitioned node)."""
    up = config([], [{"storage": "data", "path": "out/{item}/"}], stage="up")
    p = Paths(tmp_path / "up")
    c = Committer(up, p, ITEM, 1, stores(up, s3))
    c.prepare()
    write(p.outputs, "cube.txt", b"AAAAAAAAAA")
    assert c.commit_success().ok
    s3.put_object(Bucket=BUCKET, Key="proj/out/n1/cube.txt", Body=b"BBBBBBBBBB",
                  Metadata={"sha256": hashlib.sha256(b"BBBBBBBBBB").hexdigest()})


def test_cached_rewritten_object_fails_against_manifest(s3: Any, tmp_path: Path) -> None:
    _committed_then_rewritten(s3, tmp_path)
    # one stage reads the key itself, through the node cache
    one = config([{"storage": "data", "path": "out/{item}/cube.txt", "cache": True}], [],
                 stage="one")
    p1 = Paths(tmp_path / "one")
    p1.cache.mkdir(parents=True)
    stage_in(one, p1, ITEM, stores(one, s3))
    # another reads the output through its manifest, on the same node
    man = config([{"storage": "data", "path": "out/{item}/", "cache": True}], [], stage="man")
    p2 = Paths(tmp_path / "man")
    p2.cache.parent.mkdir(parents=True, exist_ok=True)
    p2.cache.symlink_to(p1.cache)
    with pytest.raises(ChecksumError):
        stage_in(man, p2, ITEM, stores(man, s3))
        pytest.fail(f"staged {(p2.inputs / 'cube.txt').read_bytes()!r}, the manifest lists "
                    f"sha256 of b'AAAAAAAAAA'")


def test_control_without_cache_it_is_caught(s3: Any, tmp_path: Path) -> None:
    _committed_then_rewritten(s3, tmp_path)
    man = config([{"storage": "data", "path": "out/{item}/", "cache": False}], [], stage="man")
    with pytest.raises(ChecksumError):
        stage_in(man, Paths(tmp_path / "man"), ITEM, stores(man, s3))
