"""Node-level whole-file cache for S3 inputs, shared by the pods of one namespace on a node.

The Pegasus study found S3 only competitive with a whole-file cache per node: many
tasks on a node read the same reference files. The hostPath is one per node, so each
namespace (tenant) gets its own partition, namespaces/<namespace>/, and an entry is
keyed by where it came from as well as what it is: a tenant that points a storage at
an endpoint it controls cannot plant bytes another run reads as its own object. Hits
are checked by size only, so the key must say everything. Layout of a partition:

    objects/<h>     the verified file, h = sha256 of (endpoint, bucket, key, ETag); its
                    mtime is the last use (atime is unreliable under relatime/noatime)
    locks/<h[:3]>   4096 lock stripes: N processes wanting one object take the same
                    flock, so exactly one downloads while the others wait and then hit
    tmp/            downloads in progress, renamed into objects/ when complete

The size cap applies to each partition: one namespace's pods never delete another's
entries.

Readers open the file without a lock: eviction unlinks, and an open descriptor keeps
the data readable, so a reader never sees a torn file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from nightshift.runner.config import ConfigError

EVICT_LOCK = "evict.lock"
RESCAN_EVERY = 64
PARTITIONS = "namespaces"
# A Kubernetes namespace name (RFC 1123 label): never `..`, a slash or empty.
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    hit_bytes: int = 0
    miss_bytes: int = 0
    evicted: int = 0


def _sendfile(src: int, dst: int, size: int) -> None:
    # In-kernel copy: a hit costs a local disk copy, not a trip through Python buffers.
    offset = 0
    while offset < size:
        sent = os.sendfile(dst, src, offset, size - offset)
        if sent == 0:
            raise OSError(f"cache file shrank at {offset} of {size} bytes")
        offset += sent


def cache_key(endpoint: str, bucket: str, key: str, etag: str) -> str:
    # JSON, not a joined string: "a/b" + "c" and "a" + "b/c" must not collide.
    return hashlib.sha256(json.dumps([endpoint, bucket, key, etag]).encode()).hexdigest()


def partition(root: Path, namespace: str) -> Path:
    if not _NAMESPACE.match(namespace):
        raise ConfigError(f"namespace {namespace!r} is not a Kubernetes namespace name: the "
                          "node cache cannot be partitioned by it; the runner config must "
                          "carry the run's namespace")
    return root / PARTITIONS / namespace


@contextlib.contextmanager
def _flock(path: Path, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class NodeCache:
    def __init__(self, root: Path, max_bytes: int, namespace: str) -> None:
        self.root = partition(root, namespace)
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._estimate: int | None = None
        self._since_scan = 0
        for d, mode in ((root / PARTITIONS, 0o1777), (self.root, 0o777),
                        *((self.root / sub, 0o777) for sub in ("objects", "locks", "tmp"))):
            d.mkdir(parents=True, exist_ok=True)
            # Pods of one namespace may run as different users; the sticky bit keeps
            # one user from renaming or removing another's partition. Directories above
            # the mounted partition are the container's own, perhaps read-only (EROFS).
            with contextlib.suppress(OSError):
                os.chmod(d, mode)

    def _object(self, h: str) -> Path:
        return self.root / "objects" / h

    def _copy_hit(self, h: str, size: int, dest: Path) -> bool:
        try:
            src = open(self._object(h), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return False
        with src:
            if os.fstat(src.fileno()).st_size != size:
                # A stale or damaged entry: drop it and download again.
                self._object(h).unlink(missing_ok=True)
                return False
            with contextlib.suppress(OSError):
                os.utime(src.fileno())
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as out:
                _sendfile(src.fileno(), out.fileno(), size)
        self.stats.hits += 1
        self.stats.hit_bytes += size
        return True

    def fetch(
        self, endpoint: str, bucket: str, key: str, etag: str, size: int, dest: Path,
        download: Callable[[Path], None],
    ) -> bool:
        """Put the object at dest; True on a cache hit. `download(tmp)` must verify."""
        h = cache_key(endpoint, bucket, key, etag)
        if size > self.max_bytes:
            # Caching it would evict everything else and still not fit the cap.
            dest.parent.mkdir(parents=True, exist_ok=True)
            download(dest)
            self.stats.misses += 1
            self.stats.miss_bytes += size
            return False
        if self._copy_hit(h, size, dest):
            return True
        with _flock(self.root / "locks" / h[:3]):
            # Someone else may have downloaded it while we waited for the lock.
            if self._copy_hit(h, size, dest):
                return True
            self._evict(reserve=size)
            tmp = self.root / "tmp" / f"{h}.{os.getpid()}.{time.monotonic_ns()}"
            try:
                download(tmp)
                os.chmod(tmp, 0o644)
                os.replace(tmp, self._object(h))
            finally:
                tmp.unlink(missing_ok=True)
        self.stats.misses += 1
        self.stats.miss_bytes += size
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self._object(h), dest)
        return False

    def entries(self) -> list[tuple[float, int, Path]]:
        out = []
        for e in os.scandir(self.root / "objects"):
            with contextlib.suppress(FileNotFoundError):
                st = e.stat()
                out.append((st.st_mtime, st.st_size, Path(e.path)))
        return out

    def size(self) -> int:
        return sum(s for _, s, _ in self.entries())

    def _evict(self, reserve: int = 0) -> None:
        """Remove least recently used files until the cache plus `reserve` fits the cap.

        Scanning the directory on every miss is quadratic in the files a pod stages, so
        between scans we trust a running estimate (our own inserts added); other pods'
        inserts are caught by a rescan every RESCAN_EVERY misses or near the cap.
        """
        if (self._estimate is not None and self._since_scan < RESCAN_EVERY
                and self._estimate + reserve <= self.max_bytes * 0.9):
            self._estimate += reserve
            self._since_scan += 1
            return
        with _flock(self.root / EVICT_LOCK):
            entries = sorted(self.entries())
            total = sum(s for _, s, _ in entries)
            for _, size, path in entries:
                if total + reserve <= self.max_bytes:
                    break
                path.unlink(missing_ok=True)
                total -= size
                self.stats.evicted += 1
            self._estimate = total + reserve
            self._since_scan = 0
