"""Fetch an input's files into place: parallel ranged GETs, verified, via the node cache.

One stream per object is what `aws s3 cp` does without tuning; a single TCP stream to
S3 tops out far below an instance's NIC, so large objects are split into ranges fetched
concurrently and written in place (pwrite), and many small objects are fetched
concurrently. Every file is verified before the step sees it: against the runner's own
SHA-256 (objects Nightshift wrote), else the single-part ETag (an MD5), else its size.
stagein.py decides what each item's inputs are and where they go; this module copies
one input's prefix or key (from S3 or a mounted volume) under one folder.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nightshift.aws.s3store import S3Store
from nightshift.runner import manifest
from nightshift.runner.cache import NodeCache
from nightshift.runner.storageerr import as_file
from nightshift.runner.store import (
    META_SHA256,
    ChecksumError,
    ContainmentError,
    DirStore,
    ObjectInfo,
    contained_path,
)

RANGE_SIZE = 8 * 2**20
RANGE_THRESHOLD = 32 * 2**20
OBJECT_THREADS = max(4, min(32, 4 * (os.cpu_count() or 1)))
# Per object. Loopback tests on 2 vCPUs peak at 2-4; EC2 to S3 (~100 MB/s per stream)
# wants more. Scale with the CPUs the pod has, within bounds.
RANGE_THREADS = max(4, min(16, 2 * (os.cpu_count() or 1)))
_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class StageStats:
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    verified: dict[str, int] = field(default_factory=lambda: {"sha256": 0, "md5": 0, "size": 0})


def plan_ranges(size: int, chunk: int = RANGE_SIZE) -> list[tuple[int, int]]:
    """Half-open byte ranges covering [0, size) in `chunk`-sized pieces."""
    return [(s, min(s + chunk, size)) for s in range(0, size, chunk)]


def verifier(obj: ObjectInfo, meta: dict[str, str]) -> tuple[str, str | None]:
    """Which checksum to check and its expected hex value: a manifest's SHA-256 first
    (what was committed), then the runner's own metadata, the ETag, the size."""
    if obj.sha256:
        return "sha256", obj.sha256
    if meta.get(META_SHA256):
        return "sha256", meta[META_SHA256]
    if _MD5_ETAG.match(obj.etag):
        return "md5", obj.etag
    # Multipart ETags are not an MD5 of the bytes; we can only check the length.
    return "size", None


class Downloader:
    def __init__(self, store: S3Store, range_size: int = RANGE_SIZE,
                 range_threshold: int = RANGE_THRESHOLD, threads: int = RANGE_THREADS) -> None:
        self.store = store
        self.range_size = range_size
        self.range_threshold = range_threshold
        self.threads = threads
        self.ranges = ThreadPoolExecutor(threads, thread_name_prefix="range")
        self.verified: dict[str, int] = {"sha256": 0, "md5": 0, "size": 0}

    def close(self) -> None:
        self.ranges.shutdown()

    def download(self, obj: ObjectInfo, dest: Path) -> None:
        """Fetch and verify; raise ChecksumError when the bytes do not match."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        if obj.size == 0:
            dest.write_bytes(b"")
            self.verified["size"] += 1
            return
        if obj.size <= self.range_threshold:
            data, meta = self.store.get_range(obj.key, 0, obj.size, obj.etag)
            kind, want = verifier(obj, meta)
            got = hashlib.new(kind, data).hexdigest() if want else None
            dest.write_bytes(data)
        else:
            kind, want, got = self._ranged(obj, dest)
        if dest.stat().st_size != obj.size:
            raise ChecksumError(f"{obj.key}: {dest.stat().st_size} bytes, expected {obj.size}")
        if want and got != want:
            raise ChecksumError(f"s3://{self.store.bucket}/{obj.key}: {kind} {got} != {want}")
        self.verified[kind] += 1

    def _ranged(self, obj: ObjectInfo, dest: Path) -> tuple[str, str | None, str | None]:
        """Ranges fetched concurrently, hashed in order as they arrive (no second read).

        A window of ranges ahead of the hash cursor bounds memory to window x range size.
        """
        ranges = plan_ranges(obj.size, self.range_size)
        window = 2 * self.threads
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, obj.size)

            def fetch(r: tuple[int, int]) -> tuple[bytes, dict[str, str]]:
                data, meta = self.store.get_range(obj.key, r[0], r[1], obj.etag)
                os.pwrite(fd, data, r[0])
                return data, meta

            pending = deque(self.ranges.submit(fetch, r) for r in ranges[:window])
            nxt = len(pending)
            _, meta0 = pending[0].result()
            kind, want = verifier(obj, meta0)
            h = hashlib.new(kind) if want else None
            while pending:
                data, _ = pending.popleft().result()
                if h is not None:
                    h.update(data)
                if nxt < len(ranges):
                    pending.append(self.ranges.submit(fetch, ranges[nxt]))
                    nxt += 1
        finally:
            os.close(fd)
        return kind, want, h.hexdigest() if h is not None else None


def relative_dest(base: Path, prefix: str, key: str, single: bool) -> Path:
    rel = key.rsplit("/", 1)[-1] if single else key[len(prefix):]
    what = f"object key {key!r}"
    try:
        dest = contained_path(base, rel, what)
    except ContainmentError as e:
        raise ContainmentError(f"{e}: it would land outside {base}") from None
    if dest == Path(os.path.realpath(base)):
        raise ContainmentError(f"{what} names no file under {base}")
    return dest


def _to_stage(store: S3Store | DirStore, prefix_or_key: str, base: Path,
              fetch: Callable[[ObjectInfo, Path], object], placed: set[Path],
              own: bool = False) -> tuple[list[ObjectInfo], list[ObjectInfo]]:
    """(what to stage, what was staged already): the one object a key names, if it is
    there; under a prefix, manifest.to_stage's answer (`own`: the item's own output
    prefix), its manifest (fetched with `fetch`, when there is one) recorded in
    `placed`."""
    if not prefix_or_key.endswith("/"):
        one = store.head(prefix_or_key)
        return ([one] if one else []), []
    man = relative_dest(base, prefix_or_key, prefix_or_key + manifest.MANIFEST, single=False)
    objs, done = manifest.to_stage(store, prefix_or_key, man, fetch, own)
    if done:  # the manifest, staged where to_stage was told
        placed.add(man)
    return objs, done


def stage_s3(store: S3Store, prefix_or_key: str, base: Path, cache: NodeCache | None,
             stats: StageStats, threads: int = OBJECT_THREADS,
             placed: set[Path] | None = None, own: bool = False) -> None:
    placed = set() if placed is None else placed
    single = not prefix_or_key.endswith("/")
    dl = Downloader(store)
    try:
        objs, done = _to_stage(store, prefix_or_key, base, dl.download, placed, own)
        if not objs and not done:
            return  # nothing staged: stage_in says which input matched nothing

        def one_object(obj: ObjectInfo) -> None:
            dest = relative_dest(base, prefix_or_key, obj.key, single)
            if cache is None:
                as_file(obj.key, lambda: dl.download(obj, dest))
            else:
                # An entry is the bytes checked against the checksum it was fetched for:
                # a manifest's SHA-256 keys its own (a hit never skips that check).
                version = obj.etag + (f"/sha256:{obj.sha256}" if obj.sha256 else "")
                as_file(obj.key, lambda: cache.fetch(
                    store.endpoint, store.bucket, obj.key, version, obj.size, dest,
                    lambda tmp: dl.download(obj, tmp)))
            placed.add(dest)

        with ThreadPoolExecutor(threads, thread_name_prefix="object") as pool:
            for f in [pool.submit(one_object, o) for o in objs]:
                f.result()
    finally:
        dl.close()
    stats.files += len(objs) + len(done)
    stats.bytes += sum(o.size for o in [*objs, *done])
    for k, v in dl.verified.items():
        stats.verified[k] += v


def stage_dir(store: DirStore, prefix_or_key: str, base: Path, stats: StageStats,
              placed: set[Path] | None = None, own: bool = False) -> None:
    single = not prefix_or_key.endswith("/")
    placed = set() if placed is None else placed
    # One file: a directory named without its / is refused by stage_in.
    objs, done = _to_stage(store, prefix_or_key, base, store.copy_to, placed, own)
    dests = [relative_dest(base, prefix_or_key if not single else "", o.key, single)
             for o in objs]
    with ThreadPoolExecutor(OBJECT_THREADS) as pool:
        for f in [pool.submit(as_file, o.key, functools.partial(store.copy_to, o, d))
                  for o, d in zip(objs, dests, strict=True)]:
            f.result()
    placed.update(dests)
    objs += done
    stats.files += len(objs)
    stats.bytes += sum(o.size for o in objs)
    stats.verified["sha256" if all(o.sha256 for o in objs) else "size"] += len(objs)
