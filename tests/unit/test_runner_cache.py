"""Node cache: one download for N concurrent processes, LRU eviction under the cap."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path

from nightshift.runner.cache import NodeCache, cache_key

DATA = b"x" * 100_000


def _want(root: str, dest: str, log: str, start: float) -> bool:
    cache = NodeCache(Path(root), 10 * 2**20, "ns")

    def download(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # a slow download, so the others pile up on the lock
        tmp.write_bytes(DATA)

    while time.time() < start:  # start together
        time.sleep(0.001)
    return cache.fetch("http://s3", "bucket", "key", "etag1", len(DATA), Path(dest), download)


def test_eight_processes_one_download(tmp_path: Path) -> None:
    log = tmp_path / "downloads.log"
    start = time.time() + 0.5
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(8) as pool:
        hits = pool.starmap(_want, [(str(tmp_path / "cache"), str(tmp_path / f"d{i}"),
                                     str(log), start) for i in range(8)])
    assert len(log.read_text().splitlines()) == 1
    assert sorted(hits) == [False] + [True] * 7
    for i in range(8):
        assert (tmp_path / f"d{i}").read_bytes() == DATA


def test_eviction_keeps_the_cap_and_drops_least_recently_used(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", max_bytes=250, namespace="ns")

    def put(key: str) -> bool:
        return cache.fetch("", "b", key, "e", 100, tmp_path / "out" / key,
                           _filler(100))

    put("a")
    put("b")
    os.utime(cache.root / "objects" / cache_key("", "b", "b", "e"), (1, 1))  # b: least recent
    assert put("a")  # hit, refreshes a
    assert not put("c")  # needs room: evicts b, not a
    assert cache.size() <= 250
    assert put("a") and not put("b")
    assert cache.stats.evicted == 2 and cache.size() <= 250


def test_object_bigger_than_cap_bypasses_cache(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", max_bytes=10, namespace="ns")
    assert not cache.fetch("", "b", "k", "e", 100, tmp_path / "d",
                           _filler(100, b"z"))
    assert (tmp_path / "d").read_bytes() == b"z" * 100 and cache.size() == 0


def _filler(n: int, byte: bytes = b"y") -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        tmp.write_bytes(byte * n)
    return write
