"""The commit sidecar: samples /proc, interleaves uploads, commits, writes the record.

It runs as a native sidecar (an init container with restartPolicy: Always) so it lives
beside every step container, whichever step is running. A sidecar that exits is
restarted by the kubelet, so after its work it idles until SIGTERM; a restarted sidecar
finds `commit.result` (the message the step script waits for) and does not commit
twice, but hands the message to the step again.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

from nightshift.aws.s3store import S3Store
from nightshift.runner import mounts, procstat, record
from nightshift.runner.commit import (
    CommitResult,
    Committer,
    fifo_signal,
    safe,
    utcnow,
)
from nightshift.runner.config import Item, Paths, RunnerConfig
from nightshift.runner.stepsh import EX_TEMPFAIL, FIFO, REQUEST
from nightshift.runner.storageerr import storage_error
from nightshift.runner.store import DirStore

log = logging.getLogger(__name__)

RESULT = "commit.result"
INTERLEAVE_EVERY = 2  # seconds between scans of interleave outputs
PREPARE_EVERY = 10


def read_request(state: Path) -> tuple[str, int] | None:
    try:
        text = (state / REQUEST).read_text()
    except FileNotFoundError:
        return None
    if not text.endswith("\n"):
        return None  # the script is still writing the line
    step, _, rc = text.strip().rpartition(" ")
    return step, int(rc)


def step_times(state: Path) -> list[dict[str, Any]]:
    steps = []
    for start in sorted((state / "steps").glob("*.start"), key=lambda p: p.stat().st_mtime):
        name = start.name[: -len(".start")]
        rc_file = start.with_name(name + ".rc")
        entry: dict[str, Any] = {"name": name, "start": _iso(start.stat().st_mtime)}
        if rc_file.exists():
            entry["end"] = _iso(rc_file.stat().st_mtime)
            entry["exitCode"] = int(rc_file.read_text().strip() or -1)
        steps.append(entry)
    return steps


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def on_signal_set(event: threading.Event) -> None:
    """Set `event` from a signal handler. Never event.set() in the handler itself: it
    runs in the main thread, which may be inside event.wait() holding the Event's lock,
    a plain Lock, so the set would wait for the main thread forever and the sidecar hang
    until the kubelet's grace period kills it (seen once in a loaded CI run: the commit
    container still up 30 s after its SIGTERM). A thread sets it once the lock is free."""
    threading.Thread(target=event.set, daemon=True).start()


class Sidecar:
    def __init__(self, cfg: RunnerConfig, paths: Paths, item: Item,
                 stores: dict[str, S3Store | DirStore], env: dict[str, str]) -> None:
        self.cfg, self.paths, self.item, self.stores, self.env = cfg, paths, item, stores, env
        self.state = paths.state
        try:
            self.staged: dict[str, Any] = json.loads((self.state / "stagein.json").read_text())
        except FileNotFoundError:
            self.staged = {}
        self.attempt = int(self.staged.get("attempt", 1))
        pgid = env.get("NIGHTSHIFT_PROC_PGID", "")
        self.sampler = procstat.Sampler(pgid=int(pgid) if pgid.isdigit() else None)
        self.committer = Committer(cfg, paths, item, self.attempt, stores)
        self.stop = threading.Event()
        self.node: dict[str, str | None] = {}
        self.prepare_error = "not tried"

    def _on_term(self, signum: int, frame: object) -> None:
        on_signal_set(self.stop)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        if (self.state / RESULT).exists():
            # Restarted: the one before may have died between the result and the FIFO,
            # and the step would wait on the FIFO for ever. Say it again (no reader, the
            # step has it already: nothing happens until SIGTERM).
            message = (self.state / RESULT).read_text().strip()
            log.info("commit already done (sidecar restarted): %r; handing it to the step "
                     "again, then idling", message[:80])
            threading.Thread(target=fifo_signal, args=(self.state / FIFO, message),
                             kwargs={"cancel": self.stop}, daemon=True).start()
            return self._idle()
        node = threading.Thread(target=lambda: self.node.update(record.node_info(self.env)),
                                daemon=True)
        node.start()
        tick = 0
        req = None
        prepared = False
        while not self.stop.is_set():
            if self.cfg.sample_processes:
                self.sampler.sample()
            if not prepared and tick % PREPARE_EVERY == 0:
                prepared = self._prepare()
            if prepared and tick % INTERLEAVE_EVERY == 0:
                self._interleave()
            req = read_request(self.state)
            if req:
                break
            tick += 1
            self.stop.wait(1.0)
        node.join(timeout=3)
        if req is None:  # SIGTERM before the steps finished: record what we know
            self._write_record(None, "terminated", CommitResult(ok=False), None)
            return 0
        step, rc = req
        if not prepared and not self._prepare():
            res = CommitResult(ok=False, error=f"storage unreachable: {self.prepare_error}")
        elif rc == 0:
            res = safe(self.committer.commit_success, "commit")
        else:
            res = safe(self.committer.commit_failure, "saving failed outputs")
        phase = "succeeded" if rc == 0 and res.ok else "failed"
        # The pod's exit code: the user's, or EX_TEMPFAIL when only the commit failed.
        # failedStep names a step only when it failed: a commit that failed is the
        # record's error, not the last step's fault.
        self._write_record(EX_TEMPFAIL if rc == 0 and not res.ok else rc, phase, res,
                           step if rc else None)
        # "failed <why>" on one line: the step script prints it last, so it becomes the
        # step's termination message and the run's failure sample.
        why = " ".join((res.error or "").split())[:600]  # the advice comes last
        message = "ok" if res.ok else f"failed {why}".rstrip()
        # The whole message, written whole: a restarted sidecar signals it again.
        tmp = self.state / (RESULT + ".tmp")
        tmp.write_text(message + "\n")
        tmp.replace(self.state / RESULT)
        fifo_signal(self.state / FIFO, message, cancel=self.stop)
        return self._idle()

    def _prepare(self) -> bool:
        # Storage may be briefly unreachable when the pod starts; keep sampling /proc
        # and try again rather than crash-looping the sidecar.
        try:
            mounts.check(self.cfg, self.env)  # a FUSE volume not mounted: never commit to it
            self.committer.prepare()
            return True
        except Exception as e:
            log.warning("preparing outputs (will retry): %s", e)
            # The last error is the one the failure sample shows if it never succeeds.
            self.prepare_error = storage_error(e)
            return False

    def _interleave(self) -> None:
        if not any(o.ref.mode == "interleave" for o in self.committer.outputs):
            return
        pids = [k[0] for k in self.sampler.alive]
        try:
            self.committer.interleave(procstat.open_files(Path("/proc"), pids,
                                                          self.paths.outputs))
        except Exception as e:  # the final commit uploads whatever this missed
            log.warning("interleave upload: %s", e)

    def _usage(self) -> dict[str, object]:
        totals = self.sampler.totals()
        if not self.cfg.sample_processes:
            # Not sampled (spec.processSampling): unknown, not zero.
            return {k: None for k in totals} | {"samples": 0}
        return totals

    def _idle(self) -> int:
        self.stop.wait()
        if self.cfg.clean_work:
            # hostPath scratch is not removed with the pod; the kubelet will not do it.
            shutil.rmtree(self.paths.work, ignore_errors=True)
        return 0

    def _write_record(self, rc: int | None, phase: str, res: CommitResult,
                      failed_step: str | None) -> None:
        key = record.record_key(self.cfg, self.item)
        if key is None or self.cfg.archive is None:
            return
        staged = self.staged.get("stageIn", {})
        rec = record.build(
            self.cfg, self.item, self.attempt,
            previous=self.staged.get("previousRecord"),
            pod=self.env.get("NIGHTSHIFT_POD_NAME"), **self.node,
            start=self.staged.get("start"), end=utcnow(), phase=phase, exitCode=rc,
            failedStep=failed_step, steps=step_times(self.state),
            bytesIn=staged.get("bytes", 0), filesIn=staged.get("files", 0),
            stageInSeconds=round(staged.get("seconds", 0.0), 3),
            verified=staged.get("verified"),
            cacheHits=staged.get("cache_hits", 0), cacheMisses=staged.get("cache_misses", 0),
            bytesOut=res.bytes, filesOut=res.files, manifests=res.manifests,
            failedOutputs=res.failed_keys, error=res.error, **self._usage())
        try:
            record.write(self.stores[self.cfg.archive.storage], key, rec)
        except Exception:  # the record is an account, not a result: never fail the item
            log.exception("writing task record %s", key)
