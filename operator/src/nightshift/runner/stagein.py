"""Stage inputs into the item's scratch: parallel ranged GETs, verified, via the node cache.

One stream per object is what `aws s3 cp` does without tuning; a single TCP stream to
S3 tops out far below an instance's NIC, so large objects are split into ranges fetched
concurrently and written in place (pwrite), and many small objects are fetched
concurrently. Every file is verified before the step sees it: against the runner's own
SHA-256 (objects Nightshift wrote), else the single-part ETag (an MD5), else its size.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import posixpath
import re
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nightshift.api.itemlookup import DirVolume, all_lines
from nightshift.aws.s3store import STORAGE_ERRORS, S3Store
from nightshift.runner import manifest
from nightshift.runner.cache import NodeCache
from nightshift.runner.config import (
    ConfigError,
    DataConfig,
    Item,
    Paths,
    RunnerConfig,
    as_prefix,
    fill_template,
)
from nightshift.runner.placed import Placed, unstageable
from nightshift.runner.storageerr import (
    INPUTS_NEED,
    UnstageableKeyError,
    as_file,
    storage_error,
    url,
)
from nightshift.runner.store import (
    META_SHA256,
    ChecksumError,
    ContainmentError,
    DirStore,
    ObjectInfo,
    contained_path,
    key_problem,
)

log = logging.getLogger(__name__)

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


def _manifest_dest(base: Path, prefix: str) -> Path:
    return relative_dest(base, prefix, prefix + manifest.MANIFEST, single=False)


def stage_s3(store: S3Store, prefix_or_key: str, base: Path, cache: NodeCache | None,
             stats: StageStats, threads: int = OBJECT_THREADS,
             placed: set[Path] | None = None) -> None:
    placed = set() if placed is None else placed
    single = not prefix_or_key.endswith("/")
    dl = Downloader(store)
    try:
        done: list[ObjectInfo] = []
        if single:
            one = store.head(prefix_or_key)
            if one is None:
                return  # nothing staged: stage_in says which input matched nothing
            objs = [one]
        else:
            man = _manifest_dest(base, prefix_or_key)
            objs, done = manifest.to_stage(store, prefix_or_key, man, dl.download)
            if done:  # the manifest, staged where to_stage was told
                placed.add(man)

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
              placed: set[Path] | None = None) -> None:
    single = not prefix_or_key.endswith("/")
    placed = set() if placed is None else placed
    done: list[ObjectInfo] = []
    if single:  # one file: a directory named without its / is refused by stage_in
        one = store.head(prefix_or_key)
        objs = [one] if one else []
    else:
        man = _manifest_dest(base, prefix_or_key)
        objs, done = manifest.to_stage(store, prefix_or_key, man, store.copy_to)
        if done:
            placed.add(man)
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


def _item_key(cfg: RunnerConfig, item: Item, field: str, ref: DataConfig, key: str) -> None:
    """Refuse a key built from the item that leaves its storage's prefix (or volume)."""
    st = cfg.storage(ref.storage)
    problem = key_problem(st.prefix, key)
    if problem is None and st.kind == "dir":
        # Symlinks on the volume count: the file must land under the prefix's directory.
        base = Path(os.path.realpath(Path(st.path) / posixpath.dirname(st.prefix)))
        real = Path(os.path.realpath(Path(st.path) / key))
        if not real.is_relative_to(base):
            problem = f"resolves to {real}, outside {base}"
    if problem:
        raise ContainmentError(
            f"item {item.value!r}: {field}.path {ref.path!r} gives key {key!r} in storage "
            f"{st.name!r}, which {problem}; an item must name a place under the storage's "
            f"prefix {st.prefix!r} (no '..' that climbs out of it, no NUL)")


def _local(root: Path, local_path: str, field: str) -> Path:
    return contained_path(root, local_path, f"{field}.localPath") if local_path else root


def _link(root: Path, name: str, field: str) -> Path:
    """Where a stream input's symlink goes; the link itself is not followed (it may be
    left from an earlier attempt, pointing into the volume)."""
    leaf = posixpath.basename(name)
    if leaf in ("", ".", ".."):
        raise ContainmentError(f"{field}.localPath: {name!r} names no file under {root}")
    return _local(root, posixpath.dirname(name), field) / leaf


def gathered_items(paths: Paths, ref: DataConfig) -> list[str | None]:
    """The items of the stage `ref` gathers ([None]: the input is not a gathering one)."""
    if not ref.gather:
        return [None]
    folder = paths.gather(ref.gather)
    found: list[str | None] = [*all_lines(DirVolume(folder))]
    if not found:
        raise ConfigError(f"gather {ref.gather!r}: no items at {folder}; mount that stage's "
                          "items ConfigMaps there (the operator renders them for the "
                          "stage-in container)")
    return found


def _input_places(cfg: RunnerConfig, paths: Paths, item: Item, i: int, ref: DataConfig
                  ) -> list[tuple[str, str]]:
    """(path in the storage, local name under inputs/) of each copy of input i: one, or
    one per gathered item at <localPath or storage name>/<gathered item> (stream) or
    <localPath>/<gathered item> (stage)."""
    st = cfg.storage(ref.storage)
    local = (ref.local_path or st.name) if ref.mode == "stream" else ref.local_path
    out = []
    for g in gathered_items(paths, ref):
        where = local if g is None else (posixpath.join(local, g) if local else g)
        out.append((fill_template(ref.path, cfg, item, g), where))
    return out


def check_item_paths(cfg: RunnerConfig, paths: Paths, item: Item) -> None:
    """Every path and key the item's inputs and outputs will use stays under its root.

    Run in the init container, before anything is read or written: an item that
    escapes fails its pod before any step runs, and the sidecar never commits it.
    A gathered item is checked the same way, for its path and its place under inputs/.
    """
    for i, ref in enumerate(cfg.inputs):
        st = cfg.storage(ref.storage)
        for path, where in _input_places(cfg, paths, item, i, ref):
            if ref.mode == "stream":
                _link(paths.inputs, where, f"inputs[{i}]")
                try:
                    contained_path(Path(st.path), path, "link")
                except ContainmentError as e:
                    raise ContainmentError(
                        f"item {item.value!r}: inputs[{i}].path {ref.path!r} gives "
                        f"{path!r}, which leaves the volume of storage {st.name!r}: {e}"
                    ) from None
                continue
            _local(paths.inputs, where, f"inputs[{i}]")
            _item_key(cfg, item, f"inputs[{i}]", ref, st.prefix + path)
    for i, ref in enumerate(cfg.outputs):
        st = cfg.storage(ref.storage)
        path = as_prefix(fill_template(ref.path, cfg, item))
        _local(paths.outputs, ref.local_path, f"outputs[{i}]")
        _item_key(cfg, item, f"outputs[{i}]", ref, st.prefix + path)
        if ref.failed_prefix:
            _item_key(cfg, item, f"outputs[{i}]", ref,
                      st.prefix + as_prefix(ref.failed_prefix) + path)


def stage_in(cfg: RunnerConfig, paths: Paths, item: Item,
             stores: dict[str, S3Store | DirStore]) -> StageStats:
    stats = StageStats()
    t0 = time.monotonic()
    check_item_paths(cfg, paths, item)
    cache: NodeCache | None = None
    placed = Placed()
    for i, ref in enumerate(cfg.inputs):
        st = cfg.storage(ref.storage)
        staged, missing = 0, []
        for path, where in _input_places(cfg, paths, item, i, ref):
            if ref.mode == "stream":
                # The volume is mounted into the step containers; link the item's part.
                link = _link(paths.inputs, where, f"inputs[{i}]")
                link.parent.mkdir(parents=True, exist_ok=True)
                link.unlink(missing_ok=True)
                link.symlink_to(Path(st.path) / path)
                placed.of(i).add(link)
                continue
            base = _local(paths.inputs, where, f"inputs[{i}]")
            store = stores[ref.storage]
            full = st.prefix + path
            log.info("inputs[%d]: staging %s:%s into %s", i, st.name, full, base)
            before = stats.files
            try:
                if isinstance(store, DirStore):
                    stage_dir(store, full, base, stats, placed.of(i))
                else:
                    use_cache = ref.cache and paths.cache.is_dir()
                    if use_cache and cache is None:
                        cache = NodeCache(paths.cache, cfg.cache_max_bytes, cfg.namespace)
                    stage_s3(store, full, base, cache if use_cache else None, stats,
                             placed=placed.of(i))
            except UnstageableKeyError as e:
                raise InputStorageError(f"inputs[{i}] ({st.name}: {url(store, full)}): "
                                        f"{unstageable(i, e, placed, cfg.inputs)}") from e
            except INPUT_ERRORS as e:
                if isinstance(e, PermissionError) and not isinstance(store, DirStore):
                    raise  # the pod's own scratch or cache, not this input's storage
                raise InputStorageError(
                    f"inputs[{i}] ({st.name}: {url(store, full)}): "
                    f"{storage_error(e, INPUTS_NEED)}") from e
            if stats.files > before:
                staged += 1
            elif isinstance(store, DirStore) and not full.endswith("/") and store.is_dir(full):
                raise FileNotFoundError(
                    f"inputs[{i}].path {ref.path!r} names a directory in storage {st.name!r} "
                    f"({url(store, full)}), not a file: add a trailing / to stage the files "
                    "under it")
            else:
                missing.append(url(store, full))
        _check_matched(i, ref, st.name, staged, missing)
    if cache:
        stats.cache_hits, stats.cache_misses = cache.stats.hits, cache.stats.misses
    stats.seconds = time.monotonic() - t0
    return stats


# A mounted storage's PermissionError too, named like an S3 refusal (a missing file
# stays FileNotFoundError: the input is not there).
INPUT_ERRORS: tuple[type[Exception], ...] = (*STORAGE_ERRORS, PermissionError)


class InputStorageError(Exception):
    """Reading an input failed in its storage: the storage's error (its __cause__, which
    says whether a retry may help), with the input, where, and what to check."""


def _check_matched(i: int, ref: DataConfig, storage: str, staged: int,
                   missing: Sequence[str]) -> None:
    """An input that matched no file fails the item (exit 66): a typo in path, or a
    night that is not there, would run the steps on nothing. Not when the input is
    optional; a gathered input only when no gathered item has any (one that failed left
    none)."""
    if not missing or ref.optional or (ref.gather and staged):
        return
    n = len(missing)
    what = (f"for any of the {n} item{'s' if n != 1 else ''} of {ref.gather!r} it gathers "
            f"(first: {missing[0]})" if ref.gather else f"({missing[0]})")
    raise FileNotFoundError(
        f"inputs[{i}].path {ref.path!r} matched no file in storage {storage!r} {what}: "
        f"check the path and that the data is there, or set inputs[{i}].optional: true "
        "when an item may have no input")


def write_stats(paths: Paths, stats: StageStats, extra: dict[str, object]) -> None:
    doc = {"stageIn": asdict(stats), **extra}
    (paths.state / "stagein.json").write_text(json.dumps(doc))
