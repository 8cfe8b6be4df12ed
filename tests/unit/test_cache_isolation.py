"""The node cache is not shared across S3 endpoints or namespaces (issue 14: cache poisoning).

The attack: a tenant points a storage at an endpoint it controls, serving bytes of its
choosing under another tenant's bucket, key and (multipart, so only the size is checked)
ETag. Before the fix the cache entry was keyed by bucket/key/ETag only, so the victim's
next stage-in on that node was a hit on the planted bytes. Each test stages through the
real stage-in path and reads what the step would see.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.config import Item, Paths, RunnerConfig
from nightshift.runner.download import StageStats
from nightshift.runner.stagein import stage_in

ETAG = "0123456789abcdef0123456789abcdef-2"  # multipart: verified by size only
KEY = "proj/ref.dat"


class FakeS3:
    """One object, served by 'a server': head, ranged get (IfMatch), and the GETs counted."""

    def __init__(self, body: bytes, etag: str = ETAG) -> None:
        self.body = body
        self.etag = etag
        self.gets = 0

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        assert Key == KEY
        return {"ContentLength": len(self.body), "ETag": f'"{self.etag}"', "Metadata": {}}

    def get_object(self, Bucket: str, Key: str, Range: str, IfMatch: str  # noqa: N803
                   ) -> dict[str, Any]:
        assert IfMatch == f'"{self.etag}"'
        self.gets += 1
        start, end = (int(x) for x in Range.removeprefix("bytes=").split("-"))
        return {"Body": io.BytesIO(self.body[start:end + 1]), "Metadata": {}}


def stage(tmp_path: Path, pod: str, *, namespace: str, endpoint: str | None,
          server: FakeS3) -> tuple[bytes, StageStats]:
    """Stage KEY into pod `pod` on the one node (all pods share tmp_path/node-cache)."""
    cfg = RunnerConfig.loads(json.dumps({
        "version": 1, "run": "r", "namespace": namespace, "stage": "s",
        "storages": {"data": {"kind": "s3", "bucket": "shared-name", "prefix": "proj/",
                              "endpoint": endpoint, "region": "us-east-1"}},
        "inputs": [{"storage": "data", "path": "ref.dat", "cache": True}], "outputs": []}))
    paths = Paths(tmp_path / pod)
    (tmp_path / "node-cache").mkdir(exist_ok=True)
    paths.cache.parent.mkdir(parents=True, exist_ok=True)
    paths.cache.symlink_to(tmp_path / "node-cache")
    store = S3Store(cfg.storage("data"), server)  # type: ignore[arg-type]
    stats = stage_in(cfg, paths, Item("x", 0, 0), {"data": store})
    return (paths.inputs / "ref.dat").read_bytes(), stats


def test_same_object_twice_is_a_hit(tmp_path: Path) -> None:
    # The control: without it the tests below would pass with no cache at all.
    server = FakeS3(b"GOOD")
    stage(tmp_path, "p1", namespace="alice", endpoint="http://s3.example:9000", server=server)
    data, stats = stage(tmp_path, "p2", namespace="alice", endpoint="http://s3.example:9000",
                        server=server)
    assert data == b"GOOD" and stats.cache_hits == 1 and server.gets == 1


@pytest.mark.parametrize("endpoint", [None, "http://s3.example:9000"])
def test_another_endpoint_does_not_share_an_entry(tmp_path: Path, endpoint: str | None) -> None:
    evil = FakeS3(b"EVIL")
    stage(tmp_path, "attacker", namespace="alice", endpoint="http://evil.example:9000",
          server=evil)
    good = FakeS3(b"GOOD")
    data, stats = stage(tmp_path, "victim", namespace="alice", endpoint=endpoint, server=good)
    assert data == b"GOOD"
    assert good.gets == 1 and stats.cache_hits == 0


def test_another_namespace_does_not_share_an_entry(tmp_path: Path) -> None:
    # Same endpoint, bucket, key and ETag: the attacker's entry stands for one planted by
    # any means (a pod that could write the cache); the victim must not read it.
    evil = FakeS3(b"EVIL")
    stage(tmp_path, "attacker", namespace="mallory", endpoint="http://s3.example:9000",
          server=evil)
    good = FakeS3(b"GOOD")
    data, stats = stage(tmp_path, "victim", namespace="alice", endpoint="http://s3.example:9000",
                        server=good)
    assert data == b"GOOD"
    assert good.gets == 1 and stats.cache_hits == 0


def test_changed_etag_is_a_miss(tmp_path: Path) -> None:
    server = FakeS3(b"OLD!")
    stage(tmp_path, "p1", namespace="alice", endpoint=None, server=server)
    server.body, server.etag = b"NEW!", "fedcba9876543210fedcba9876543210-2"
    data, stats = stage(tmp_path, "p2", namespace="alice", endpoint=None, server=server)
    assert data == b"NEW!" and stats.cache_hits == 0 and server.gets == 2


def test_entries_live_in_the_namespace_partition(tmp_path: Path) -> None:
    stage(tmp_path, "p1", namespace="alice", endpoint=None, server=FakeS3(b"GOOD"))
    stage(tmp_path, "p2", namespace="bob", endpoint=None, server=FakeS3(b"GOOD"))
    cached = sorted(p.relative_to(tmp_path / "node-cache").parts[:2]
                    for p in (tmp_path / "node-cache").rglob("*")
                    if p.is_file() and p.parent.name == "objects")
    assert cached == [("namespaces", "alice"), ("namespaces", "bob")]


@pytest.mark.parametrize("namespace", ["", "..", "../bob", "a/b", "Alice", "x" * 64])
def test_a_namespace_that_is_not_a_name_is_refused(tmp_path: Path, namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        stage(tmp_path, "p1", namespace=namespace, endpoint=None, server=FakeS3(b"GOOD"))
    assert not any(p.is_file() for p in (tmp_path / "node-cache").rglob("*"))


def test_cache_key_separates_every_field() -> None:
    from nightshift.runner.cache import cache_key

    base = ("http://s3.example", "b", "k/x", "e")
    keys = {cache_key(*base),
            cache_key("http://s3.example/b", "", "k/x", "e"),  # same concatenation
            cache_key("http://s3.example", "b/k", "x", "e"),
            cache_key("http://other.example", "b", "k/x", "e"),
            cache_key("http://s3.example", "b", "k/x", "e2")}
    assert len(keys) == 5
