"""Stage an item's inputs into its scratch, each under its own place in inputs/.

Which files an item's inputs name (its path templates, gathered items), that every
path stays under its root, where each lands, and what failed and why; the copying
itself (ranged GETs, checksums, the node cache) is download.py's.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from nightshift.api.itemlookup import DirVolume, all_lines
from nightshift.aws.s3store import STORAGE_ERRORS, S3Store
from nightshift.runner.cache import NodeCache
from nightshift.runner.config import (
    ConfigError,
    DataConfig,
    Item,
    Paths,
    RunnerConfig,
    as_prefix,
    fill_template,
    output_path,
)
from nightshift.runner.download import StageStats, stage_dir, stage_s3
from nightshift.runner.placed import Placed, unstageable
from nightshift.runner.storageerr import (
    INPUTS_NEED,
    UnstageableKeyError,
    storage_error,
    url,
)
from nightshift.runner.store import (
    ContainmentError,
    DirStore,
    contained_path,
    key_problem,
)

log = logging.getLogger(__name__)


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
        path = output_path(ref, cfg, item)
        _local(paths.outputs, ref.local_path, f"outputs[{i}]")
        _item_key(cfg, item, f"outputs[{i}]", ref, st.prefix + path)
        if ref.failed_prefix:
            _item_key(cfg, item, f"outputs[{i}]", ref,
                      st.prefix + as_prefix(ref.failed_prefix) + path)


def own_prefixes(cfg: RunnerConfig, item: Item) -> set[tuple[str, str]]:
    """(storage, path) of each of the item's output prefixes, as its inputs name them."""
    return {(ref.storage, output_path(ref, cfg, item)) for ref in cfg.outputs}


def stage_in(cfg: RunnerConfig, paths: Paths, item: Item,
             stores: dict[str, S3Store | DirStore]) -> StageStats:
    stats = StageStats()
    t0 = time.monotonic()
    check_item_paths(cfg, paths, item)
    cache: NodeCache | None = None
    placed = Placed()
    writes = own_prefixes(cfg, item)
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
            own = path.endswith("/") and (ref.storage, path) in writes
            log.info("inputs[%d]: staging %s:%s into %s%s", i, st.name, full, base,
                     " (the item's own output prefix: as raw data)" if own else "")
            before = stats.files
            try:
                if isinstance(store, DirStore):
                    stage_dir(store, full, base, stats, placed.of(i), own)
                else:
                    use_cache = ref.cache and paths.cache.is_dir()
                    if use_cache and cache is None:
                        cache = NodeCache(paths.cache, cfg.cache_max_bytes, cfg.namespace)
                    stage_s3(store, full, base, cache if use_cache else None, stats,
                             placed=placed.of(i), own=own)
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
