"""Commit an item's outputs so a consumer sees all of them or none.

Protocol per output (prefix P = storage prefix + expanded path):
1. at pod start: read P/_SUCCESS (the previous attempt's manifest, if any), keep its
   keys in P/_SUCCESS.withdrawn (with those of an earlier withdrawn one a lost attempt
   left), delete it, abort multipart uploads left under P;
2. upload files (batch: after the last step succeeded; interleave: each file once no
   process holds it open and it has not changed for a while, then the rest at the end),
   each with its SHA-256 in metadata and checked by the server on upload. Before each
   batch of uploads, P/_SUCCESS.withdrawn is written again with the keys it is about to
   put, so an attempt lost now leaves P marked (nothing under it counts) and the next
   attempt knows every key to take back;
3. delete keys the withdrawn lists named that this attempt did not produce;
4. write P/_SUCCESS last: every key, size and checksum; then P/_SUCCESS.withdrawn goes.
Steps 2 and 3 run for every output before step 4 writes any manifest. When a step
fails, or the commit fails part-way, keys uploaded into P this attempt are deleted
(with any manifest written; and the marker, when nothing before this attempt needs
it) and the local outputs go to <storage prefix><failedPrefix><path>attempt-<n>/
instead: never into P. A stage that reads what it rewrites (an input naming its own
P) stages P as raw data, markers aside (runner/stagein.py): its retry is not refused
for its own attempts' marker.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nightshift.aws.s3store import S3Store
from nightshift.runner.config import DataConfig, Item, Paths, RunnerConfig, as_prefix, output_path
from nightshift.runner.manifest import MANIFEST, MANIFEST_VERSION, RESERVED, WITHDRAWN
from nightshift.runner.storageerr import storage_error
from nightshift.runner.store import DirStore, ObjectInfo, sha256_file, walk_files

log = logging.getLogger(__name__)

QUIET_SECONDS = 2.0
BLIND_QUIET_SECONDS = 10.0  # when we cannot see which files are open
FILE_THREADS = 4


def utcnow() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Output:
    index: int
    ref: DataConfig
    store: S3Store | DirStore
    local: Path
    prefix: str  # committed prefix (with the storage prefix)
    failed_prefix: str | None
    previous: list[str] = field(default_factory=list)  # keys in the previous manifest
    uploaded: dict[str, tuple[int, int, ObjectInfo]] = field(default_factory=dict)
    seen: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)  # reserved names the steps wrote
    marked: set[str] = field(default_factory=set)  # this attempt's keys the marker lists


@dataclass
class CommitResult:
    ok: bool
    files: int = 0
    bytes: int = 0
    manifests: list[str] = field(default_factory=list)
    failed_keys: int = 0
    error: str | None = None


class Committer:
    def __init__(self, cfg: RunnerConfig, paths: Paths, item: Item, attempt: int,
                 stores: dict[str, S3Store | DirStore]) -> None:
        self.cfg = cfg
        self.item = item
        self.attempt = attempt
        self.outputs: list[Output] = []
        for i, ref in enumerate(cfg.outputs):
            st = cfg.storage(ref.storage)
            path = output_path(ref, cfg, item)
            failed = (st.prefix + as_prefix(ref.failed_prefix) + path + f"attempt-{attempt}/"
                      if ref.failed_prefix else None)
            local = paths.outputs / ref.local_path if ref.local_path else paths.outputs
            self.outputs.append(Output(i, ref, stores[ref.storage], local, st.prefix + path,
                                       failed))

    def prepare(self) -> None:
        """Withdraw the previous attempt's manifest before touching any of its keys.

        Its keys are kept in P/_SUCCESS.withdrawn before it goes: this attempt may be
        lost before its commit deletes those it does not produce, and the next attempt,
        finding no manifest, would otherwise leave them for good. Only keys a manifest of
        this P listed are ever deleted; listing P would reach other items' keys (an item
        `a` and an item `a/b`).
        """
        for out in self.outputs:
            old = self._listed(out, MANIFEST, "files")
            earlier = self._listed(out, WITHDRAWN, "keys")
            out.previous = sorted({*(old or []), *(earlier or [])})
            if old is not None:
                # Only where a manifest goes: until this attempt uploads (_mark), a
                # consumer of a parent prefix over an item that never committed sees
                # what it saw.
                out.store.put_bytes(out.prefix + WITHDRAWN,
                                    json.dumps({"keys": out.previous}).encode())
                out.store.delete([out.prefix + MANIFEST])
            aborted = out.store.abort_uploads(out.prefix)
            if aborted:
                log.info("outputs[%d]: aborted %d stale multipart uploads", out.index, aborted)

    @staticmethod
    def _listed(out: Output, name: str, field: str) -> list[str] | None:
        """The keys P/<name> lists; None when it is not there, [] when unreadable."""
        raw = out.store.get_bytes(out.prefix + name)
        if raw is None:
            return None
        try:
            entries = json.loads(raw)[field]
            return [str(e["key"] if field == "files" else e) for e in entries]
        except (ValueError, TypeError, KeyError):
            log.warning("outputs[%d]: unreadable %s%s", out.index, out.prefix, name)
            return []

    def _mark(self, out: Output, files: list[Path]) -> None:
        """List in P/_SUCCESS.withdrawn the keys about to be uploaded into P, before they
        are: a pod lost mid-upload then leaves P marked, not raw files that read as data
        to a parent-prefix or optional consumer, and the next attempt's commit deletes
        the ones it does not produce. One write per batch with new keys."""
        new = {out.prefix + p.relative_to(out.local).as_posix() for p in files} - out.marked
        if not new:
            return
        keys = sorted({*out.previous, *out.marked, *new})
        out.store.put_bytes(out.prefix + WITHDRAWN, json.dumps({"keys": keys}).encode())
        out.marked |= new

    def _upload(self, out: Output, files: list[Path], prefix: str,
                record: bool = True) -> list[ObjectInfo]:
        if record:  # into P
            self._mark(out, files)

        def one(p: Path) -> ObjectInfo:
            st = p.stat()
            rel = p.relative_to(out.local).as_posix()
            info = out.store.put_file(p, prefix + rel, sha256_file(p))
            if record:
                out.uploaded[rel] = (st.st_size, st.st_mtime_ns, info)
            return info

        with ThreadPoolExecutor(FILE_THREADS, thread_name_prefix="upload") as pool:
            return list(pool.map(one, files))

    def _files(self, out: Output) -> Iterator[Path]:
        """The output's files for P: all but a file at its top named like the manifest
        (or the withdrawn list), skipped with a warning. Spark and Hadoop write an empty
        `_SUCCESS` there, and a step may copy the inputs' one: uploaded, the manifest
        would overwrite it and list it with the user's checksum. Refusing it would fail
        every Spark step for a marker the manifest stands in for."""
        for p in walk_files(out.local):
            if p.parent == out.local and p.name in RESERVED:
                if p.name not in out.skipped:
                    out.skipped.add(p.name)
                    log.warning("outputs[%d]: %s not committed: %s%s is the commit's own "
                                "manifest (it stands in for a Spark or Hadoop marker); "
                                "it goes to failedPrefix only if the item fails", out.index,
                                p, out.prefix, p.name)
                continue
            yield p

    def _changed(self, out: Output) -> list[Path]:
        todo = []
        for p in self._files(out):
            st = p.stat()
            prev = out.uploaded.get(p.relative_to(out.local).as_posix())
            if prev is None or prev[:2] != (st.st_size, st.st_mtime_ns):
                todo.append(p)
        return todo

    def interleave(self, open_files: set[str] | None, now: float | None = None) -> int:
        """Upload closed, settled files of interleave outputs; returns files uploaded."""
        now = time.time() if now is None else now
        quiet = QUIET_SECONDS if open_files is not None else BLIND_QUIET_SECONDS
        n = 0
        for out in self.outputs:
            if out.ref.mode != "interleave":
                continue
            ready = []
            for p in self._changed(out):
                st = p.stat()
                rel = p.relative_to(out.local).as_posix()
                sig = (st.st_size, st.st_mtime_ns, now)
                prev = out.seen.get(rel)
                if prev is None or prev[:2] != sig[:2]:
                    out.seen[rel] = sig  # changed since the last scan: wait
                    continue
                if open_files and str(p.resolve()) in open_files:
                    continue
                if now - st.st_mtime >= quiet:
                    ready.append(p)
            if ready:
                self._upload(out, ready, out.prefix)
                n += len(ready)
        return n

    def empty_required(self) -> list[Output]:
        """Required outputs the steps left empty: nothing uploaded, no file to upload."""
        return [out for out in self.outputs if out.ref.required and not out.uploaded
                and next(self._files(out), None) is None]

    def commit_success(self) -> CommitResult:
        """Every output's files first, then the manifests: a consumer sees all of the
        item's outputs or none. On any error the manifests come back out and the outputs
        go the failed way (commit_failure), whose counts the failed result carries: an
        item that fails (exit 75) leaves nothing that looks committed."""
        if empty := self.empty_required():
            # The item fails: what was interleaved into the other outputs comes back out.
            res = self.commit_failure()
            res.ok, res.error = False, "; ".join(self._said_empty(out) for out in empty)
            return res
        try:
            for out in self.outputs:
                self._settle(out)
            res = CommitResult(ok=True)
            for out in self.outputs:
                infos = sorted((u[2] for u in out.uploaded.values()), key=lambda i: i.key)
                files = [{"key": i.key, "size": i.size, "sha256": i.sha256} for i in infos]
                total = sum(i.size for i in infos)
                manifest = {
                    "version": MANIFEST_VERSION, "run": self.cfg.run, "stage": self.cfg.stage,
                    "item": self.item.value, "index": self.item.index,
                    "attempt": self.attempt, "committed": utcnow(),
                    "storage": out.ref.storage, "prefix": out.prefix, "files": files,
                    "totalBytes": total,
                }
                out.store.put_bytes(out.prefix + MANIFEST,
                                    json.dumps(manifest, indent=1).encode())
                res.files += len(files)
                res.bytes += total
                res.manifests.append(out.prefix + MANIFEST)
        except Exception as e:
            log.exception("commit failed")
            res = self._undo()
            # The commit's own error first; what the undo could not put right after it,
            # so the run's failure sample says where a manifest may be left standing.
            res.ok, res.error = False, "; ".join(filter(None, [storage_error(e), res.error]))
            return res
        for out in self.outputs:
            try:  # what it lists is deleted; one left over is read again and is harmless
                out.store.delete([out.prefix + WITHDRAWN])
            except Exception as e:
                log.warning("outputs[%d]: %s%s not deleted: %s", out.index, out.prefix,
                            WITHDRAWN, e)
        return res

    def _settle(self, out: Output) -> None:
        """Upload what changed; delete what the steps deleted and what the withdrawn
        manifests listed that this attempt did not produce."""
        present = {p.relative_to(out.local).as_posix() for p in self._files(out)}
        keys = {out.prefix + r for r in present}
        stale = [k for k in out.previous if k not in keys and k.startswith(out.prefix)
                 and k[len(out.prefix):] not in RESERVED]
        # A file uploaded while interleaving and deleted later is not an output.
        gone = [r for r in out.uploaded if r not in present]
        # Both before the uploads (the manifest is withdrawn already): on a mounted
        # storage a name that was a file may now be a folder, or the other way round.
        out.store.delete(stale + [out.prefix + r for r in gone])
        for r in gone:
            del out.uploaded[r]
        self._upload(out, self._changed(out), out.prefix)

    def _undo(self) -> CommitResult:
        """A commit that failed part-way: every output's manifest out (also one whose
        write failed after all, its answer lost; prepare withdrew the old ones), then
        the failed way. A manifest left standing reads as a committed item, so it is in
        the result's error, after the commit's own; outputs not saved the failed way
        are only logged (the record's failedOutputs says how many were, and that save
        fails for the reason the commit did)."""
        left: list[str] = []
        for out in self.outputs:
            try:
                out.store.delete([out.prefix + MANIFEST])
            except Exception as e:
                log.exception("outputs[%d]: withdrawing %s%s after a failed commit",
                              out.index, out.prefix, MANIFEST)
                left.append(f"outputs[{out.index}]'s {out.prefix}{MANIFEST} could not be "
                            f"withdrawn ({storage_error(e)}): until a retry of this item "
                            "commits, or it is deleted by hand, that prefix reads as "
                            "committed")
        try:
            res = self.commit_failure()
        except Exception:
            log.exception("saving the outputs of a failed commit")
            res = CommitResult(ok=False)
        res.error = "; ".join(left) or None
        return res

    def _said_empty(self, out: Output) -> str:
        where = "$NIGHTSHIFT_OUTPUTS" + (f"/{out.ref.local_path}" if out.ref.local_path else "")
        return (f"stage {self.cfg.stage} outputs[{out.index}] is required, but the steps "
                f"wrote no file under {where} (to commit to {out.ref.storage}: "
                f"{out.prefix}); check where the step writes, or drop required if some "
                "items have no outputs")

    def commit_failure(self) -> CommitResult:
        """Pull interleaved keys back out of the committed path; keep outputs for debugging."""
        res = CommitResult(ok=True)
        for out in self.outputs:
            # The marked keys too: an upload whose answer was lost may have landed.
            out.store.delete(sorted({*(out.prefix + r for r in out.uploaded), *out.marked}))
            out.uploaded.clear()
            if out.marked and not out.previous:
                # Every key it listed is gone and none came before: P is as this
                # attempt found it, so a failed item reads as before (nothing of it).
                out.store.delete([out.prefix + WITHDRAWN])
            out.marked.clear()
            if out.failed_prefix is None:
                continue
            files = list(walk_files(out.local))
            infos = self._upload(out, files, out.failed_prefix, record=False)
            res.failed_keys += len(infos)
            res.bytes += sum(i.size for i in infos)
        return res


def safe(fn: Callable[[], CommitResult], what: str) -> CommitResult:
    """Run a commit phase; any error becomes a failed result (the step script exits 75)."""
    try:
        return fn()
    except Exception as e:
        log.exception("%s failed", what)
        return CommitResult(ok=False, error=storage_error(e))


def fifo_signal(path: Path, message: str, stop: float = 3600.0,
                cancel: threading.Event | None = None) -> bool:
    """Hand the step script its result; it blocks reading the FIFO until we write.
    `cancel` (SIGTERM) ends the wait: no step is left to read it."""
    deadline = time.monotonic() + stop
    while time.monotonic() < deadline:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet (the script is about to open it)
            if cancel is None:
                time.sleep(0.1)
            elif cancel.wait(0.1):
                return False
            continue
        try:
            os.write(fd, (message + "\n").encode())
        finally:
            os.close(fd)
        return True
    return False
