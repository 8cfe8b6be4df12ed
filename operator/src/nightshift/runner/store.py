"""What stage-in and commit need from a storage, for S3 (aws.s3store.S3Store) and a mounted PVC.

A PVC storage (kind "dir") lets the same stage/batch/interleave settings reproduce the
shared-volume placements of the supernova study (NFS staged to local disk, outputs to
the shared volume at the end or as produced).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nightshift.runner.config import ConfigError

CHUNK = 8 * 2**20
META_SHA256 = "sha256"  # x-amz-meta-sha256: the runner's own end-to-end checksum


class ChecksumError(RuntimeError):
    """Bytes read do not match what the store says it holds."""


class ContainmentError(ConfigError):
    """A path or key built from an item or a setting would leave its root.

    A ConfigError, so stage-in exits 78 (configuration), not 75 (transient): the same
    item gives the same path on every attempt.
    """


def contained_path(root: Path, rel: str, what: str) -> Path:
    """root/rel with symlinks resolved, refused unless it stays under root (resolved too).

    A string-prefix test would let `/data` admit `/data2/x`; is_relative_to compares
    whole components.
    """
    if "\0" in rel:
        raise ContainmentError(f"{what}: {rel!r} holds a NUL byte")
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(real_root / rel))
    if not real.is_relative_to(real_root):
        raise ContainmentError(f"{what}: {rel!r} resolves to {real}, outside {real_root}")
    return real


def normalise_key(key: str) -> str | None:
    """The key with `.` and `..` segments applied as a file system would; None when it
    climbs above the bucket's root or is absolute. A trailing slash is kept."""
    if not key:
        return ""
    norm = posixpath.normpath(key)
    if norm.startswith("/") or norm == ".." or norm.startswith("../"):
        return None
    if norm == ".":
        return ""
    return norm + "/" if key.endswith("/") else norm


def key_problem(prefix: str, key: str) -> str | None:
    """Why `key` does not stay under `prefix`, or None when it does.

    S3 itself gives `..` no meaning, but gateways that map keys to files (versitygw's
    posix backend) and tools that sync a bucket to disk do: a key is judged by where it
    would land there.
    """
    if "\0" in key:
        return "holds a NUL byte"
    norm, base = normalise_key(key), normalise_key(prefix)
    if norm is None:
        return "climbs above the bucket's root"
    if base is None or not norm.startswith(base):
        return f"resolves to {norm!r}, outside the prefix {prefix!r}"
    return None


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str = ""
    sha256: str | None = None


class Store(Protocol):
    name: str

    def ls(self, prefix: str) -> list[ObjectInfo]: ...
    def head(self, key: str) -> ObjectInfo | None: ...
    def put_file(self, local: Path, key: str, sha256: str) -> ObjectInfo: ...
    def put_bytes(self, key: str, data: bytes, content_type: str = ...) -> None: ...
    def get_bytes(self, key: str) -> bytes | None: ...
    def delete(self, keys: list[str]) -> None: ...
    def abort_uploads(self, prefix: str) -> int: ...


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _into_folder(dest: Path, write: Callable[[], object]) -> None:
    """Make dest's folder and write beside it; once more if another pod's delete took the
    folder away in between (it removes folders it empties: items `a` and `a/b`)."""
    for last in (False, True):
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            write()
            return
        except FileNotFoundError:
            if last:
                raise


def walk_files(root: Path) -> Iterator[Path]:
    """Regular files under root, sorted, following no symlinks (outputs are real files)."""
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            if p.is_file() and not p.is_symlink():
                yield p


class DirStore:
    """A mounted volume as a store; writes go to a temp name then rename (atomic)."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root

    def _path(self, key: str) -> Path:
        return contained_path(self.root, key, f"storage {self.name!r}: key")

    def _sidecar(self, key: str) -> Path:
        # Checksums live beside the file: NFS and Gluster have no object metadata.
        p = self._path(key)
        return p.with_name(f".{p.name}.nightshift-meta")

    def ls(self, prefix: str) -> list[ObjectInfo]:
        real_root = Path(os.path.realpath(self.root))
        base = self._path(prefix) if prefix else real_root
        if base.is_file():
            return [self._info(prefix)]
        # Keys under the prefix as given, not as resolved: a folder reached through a
        # link (latest -> run-7) keeps the names the manifest and the caller use.
        pre = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        out = []
        for p in walk_files(base):
            if p.name.endswith(".nightshift-meta"):
                continue
            out.append(self._info(pre + p.relative_to(base).as_posix()))
        return out

    def _info(self, key: str) -> ObjectInfo:
        st = self._path(key).stat()
        sha = None
        with contextlib.suppress(OSError, ValueError):
            sha = json.loads(self._sidecar(key).read_text()).get(META_SHA256)
        return ObjectInfo(key, st.st_size, f"{st.st_mtime_ns:x}-{st.st_size:x}", sha)

    def head(self, key: str) -> ObjectInfo | None:
        return self._info(key) if self._path(key).is_file() else None

    def is_dir(self, key: str) -> bool:
        return self._path(key).is_dir()

    def put_file(self, local: Path, key: str, sha256: str) -> ObjectInfo:
        dest = self._path(key)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        _into_folder(dest, lambda: shutil.copyfile(local, tmp))
        if sha256_file(tmp) != sha256:
            tmp.unlink()
            raise ChecksumError(f"{self.name}:{key}: copy does not match {local}")
        self._sidecar(key).write_text(json.dumps({META_SHA256: sha256}))
        os.replace(tmp, dest)
        return ObjectInfo(key, dest.stat().st_size, "", sha256)

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/json") -> None:
        dest = self._path(key)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        _into_folder(dest, lambda: tmp.write_bytes(data))
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, dest)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, keys: list[str]) -> None:
        root = Path(os.path.realpath(self.root))
        for key in keys:
            path = self._path(key)
            for p in (path, self._sidecar(key)):
                # Not a file (any more): nothing to delete, as on S3.
                with contextlib.suppress(FileNotFoundError, IsADirectoryError,
                                         NotADirectoryError):
                    p.unlink()
            # Folders it leaves empty go too, as S3 has none: a later commit may write a
            # file under that name.
            parent = path.parent
            while parent != root and parent.is_relative_to(root):
                try:
                    parent.rmdir()
                except OSError:  # not empty (or not there): the rest stays
                    break
                parent = parent.parent

    def abort_uploads(self, prefix: str) -> int:
        return 0

    def copy_to(self, obj: ObjectInfo, dest: Path) -> str:
        """Copy one file out, returning its SHA-256 (checked against the recorded one)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self._path(obj.key), dest)
        digest = sha256_file(dest)
        if obj.sha256 and digest != obj.sha256:
            raise ChecksumError(f"{self.name}:{obj.key}: sha256 {digest} != recorded {obj.sha256}")
        return digest
