"""The `_SUCCESS` manifest an output commits, as the next stage's stage-in reads it.

A committed output's prefix P may hold more than its manifest lists: keys a lost or
interrupted attempt interleaved, which no manifest ever named. A consumer reads exactly
the keys `P/_SUCCESS` lists; only a prefix without one (raw data) is listed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from nightshift.aws.s3store import S3Store
from nightshift.runner.config import ConfigError
from nightshift.runner.storageerr import url
from nightshift.runner.store import ChecksumError, DirStore, ObjectInfo

MANIFEST = "_SUCCESS"
MANIFEST_VERSION = 1
# The keys of a manifest an attempt withdrew, kept until its own stands (commit.py).
WITHDRAWN = MANIFEST + ".withdrawn"
# Names at the top of an output that are the commit's own, never a step's file.
RESERVED = frozenset({MANIFEST, WITHDRAWN})


class ManifestError(ChecksumError):
    """A manifest that does not describe its prefix (a listed key missing, outside it, or
    not the bytes it lists): what the consumer would read is not what was committed."""


def parse(raw: bytes, prefix: str, where: str) -> list[ObjectInfo] | None:
    """The files a Nightshift manifest lists (key, size, sha256), or None when the
    `_SUCCESS` is another tool's marker (Spark and Hadoop write an empty one): then the
    prefix is raw data."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or "files" not in doc or "version" not in doc:
        return None
    if doc["version"] != MANIFEST_VERSION:
        raise ConfigError(f"{where}: manifest version {doc['version']!r}, this runner reads "
                          f"version {MANIFEST_VERSION}: run the producing and the consuming "
                          "stage with one Nightshift release")
    # Keys are the producer's: a consumer may reach the same files under another prefix
    # (a claim mounted with another subPath, a storage with another prefix), so each is
    # taken relative to the manifest's own prefix where it has one.
    base = doc.get("prefix") if isinstance(doc.get("prefix"), str) else None
    out = []
    try:
        for f in doc["files"]:
            key, size, sha = f["key"], f["size"], f["sha256"]
            if not (isinstance(key, str) and isinstance(size, int) and isinstance(sha, str)):
                raise TypeError(f"entry {f!r}")
            rel = (key[len(base):] if base is not None and key.startswith(base)
                   else key[len(prefix):] if key.startswith(prefix) else None)
            if rel in RESERVED:
                continue  # a step's own _SUCCESS an older runner listed: the manifest now
            if not rel or rel.startswith("/") or ".." in rel.split("/"):
                raise ManifestError(f"{where} lists {key!r}, which is not a file under "
                                    f"{base or prefix!r}: the manifest is damaged or not "
                                    "this output's; commit the upstream item again")
            out.append(ObjectInfo(prefix + rel, size, "", sha))
    except (TypeError, KeyError) as e:
        raise ManifestError(f"{where}: an unreadable manifest ({e}): commit the upstream "
                            "item again") from None
    return out


def to_stage(store: S3Store | DirStore, prefix: str, dest: Path,
             fetch: Callable[[ObjectInfo, Path], object], own: bool = False
             ) -> tuple[list[ObjectInfo], list[ObjectInfo]]:
    """(what to stage from `prefix`, what this staged already). An upstream Nightshift
    output (a `_SUCCESS` manifest of ours) gives exactly the keys its manifest lists:
    anything else under it an attempt left and never committed (a lost pod's
    interleaved files). Only raw data is staged as listed. The manifest itself is staged
    first, as before, so an output committed with no files is still not "no file".

    One listing, as for raw data (not a HEAD per file: an output of 10,000 files stays
    a few LIST calls, and a refused listing says why as before); the listed files are
    then checked against the manifest's sizes, and their bytes against its SHA-256 as
    they are fetched.

    `own`: the prefix is also one of the item's own outputs (a stage that reads what it
    rewrites). Its markers are its own attempts' (this pod's sidecar may be withdrawing
    the manifest as it is listed), so it is raw data less those two names: a retry reads
    what is there, where the marker would have it read nothing and fail for good."""
    objs = [o for o in store.ls(prefix) if not o.key.endswith("/")]
    if own:
        return _raw([o for o in objs if o.key[len(prefix):] not in RESERVED]), []
    man = next((o for o in objs if o.key == prefix + MANIFEST), None)
    if man is None:
        if any(o.key == prefix + WITHDRAWN for o in objs):
            # An upstream output an attempt withdrew and none committed again (it failed
            # or was lost): nothing here is committed, as if nothing were.
            return [], []
        return _raw(objs), []
    fetch(man, dest)
    where = url(store, man.key)
    listed = parse(dest.read_bytes(), prefix, where)
    if listed is None:  # another tool's marker (Spark, Hadoop): raw data
        return [o for o in objs if o.key != man.key], [man]
    found = {o.key: o for o in objs}
    return [_as_listed(store, found.get(e.key), e, where) for e in listed], [man]


def _raw(objs: list[ObjectInfo]) -> list[ObjectInfo]:
    """A listing as raw data, less what lies in a Nightshift output withdrawn and not
    committed again (a folder holding `_SUCCESS.withdrawn` and no `_SUCCESS`: a parent
    prefix over a stage's outputs, or raw data with an output inside it), marker and
    all."""
    names = {o.key for o in objs}
    dead = {k[:-len(WITHDRAWN)] for k in names
            if k.endswith("/" + WITHDRAWN) and k[:-len(WITHDRAWN)] + MANIFEST not in names}

    def in_dead(key: str) -> bool:  # by its folders: a listing may hold 10^5 outputs
        i = key.find("/")
        while i != -1:
            if key[:i + 1] in dead:
                return True
            i = key.find("/", i + 1)
        return False

    return [o for o in objs if not dead or not in_dead(o.key)]


def _as_listed(store: S3Store | DirStore, info: ObjectInfo | None, entry: ObjectInfo,
               where: str) -> ObjectInfo:
    """The listed object a manifest entry names, to be verified against the manifest's
    SHA-256 as it is fetched."""
    if info is None:
        raise ManifestError(
            f"{where} lists {url(store, entry.key)}, which is not there: something deleted "
            "it after the commit; commit the upstream item again")
    if info.size != entry.size or (info.sha256 and info.sha256 != entry.sha256):
        raise ManifestError(
            f"{where} lists {url(store, entry.key)} with {entry.size} bytes, sha256 "
            f"{entry.sha256}; the object has {info.size} bytes, sha256 {info.sha256}: it was "
            "written again after the commit; commit the upstream item again")
    return dataclasses.replace(info, sha256=entry.sha256)
