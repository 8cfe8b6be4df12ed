"""Stage-in waits for the FUSE mounts before it reads the item's previous task record:
an archive on a glusterfs storage read before its mount came would show no record (the
retry counted as attempt 1 again), and a record written there would land on the node's
own disk, under the mount."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nightshift.api.names import MOUNT_STORAGE
from nightshift.runner import main, mounts, record
from nightshift.runner.store import DirStore

KEY = "_nightshift/run1/reduce/0.json"


def _env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    vol, root = tmp_path / "gluster", tmp_path / "pod"
    (root / "items").mkdir(parents=True)
    (root / "items" / "items").write_text("a\n")
    (vol / "_nightshift" / "run1" / "reduce").mkdir(parents=True)
    (vol / KEY).write_text(json.dumps({"attempt": 1, "phase": "failed", "item": "a"}))
    cfg = {"version": 1, "run": "run1", "namespace": "ns", "stage": "reduce",
           "storages": {"g": {"kind": "dir", "path": str(vol), "fuse": True}},
           "inputs": [], "outputs": [], "archive": {"storage": "g", "prefix": "_nightshift"}}
    env = {"NIGHTSHIFT_ROOT": str(root), "NIGHTSHIFT_RUNNER_CONFIG": json.dumps(cfg),
           "JOB_COMPLETION_INDEX": "0", "NIGHTSHIFT_IMDS_ENDPOINT": "",
           "NIGHTSHIFT_POD_NAME": "pod-0", "NODE_NAME": "node-a"}
    return env, vol


def test_the_mount_is_waited_for_before_the_previous_record_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, _ = _env(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(mounts, "wait", lambda cfg, env: calls.append("wait"))
    real_previous = record.previous

    def previous(store: Any, key: str) -> tuple[dict[str, Any] | None, BaseException | None]:
        calls.append("previous")
        return real_previous(store, key)

    monkeypatch.setattr(record, "previous", previous)
    assert main.cmd_stage_in(env) == 0
    assert calls == ["wait", "previous"]
    stats = json.loads((tmp_path / "pod" / "work" / ".nightshift" / "stagein.json").read_text())
    assert stats["attempt"] == 2


def test_a_storage_never_mounted_gets_no_record_under_its_mount_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, vol = _env(tmp_path)
    before = (vol / KEY).read_text()

    def not_mounted(cfg: Any, env: Any) -> None:
        raise mounts.NotMountedError("storage 'g': /data is not a FUSE mount on node-a")

    monkeypatch.setattr(mounts, "wait", not_mounted)
    assert main.cmd_stage_in(env) == main.EX_TEMPFAIL
    assert (vol / KEY).read_text() == before, "written to the node's disk under the mount"


def test_a_read_only_archive_fails_stage_in_before_the_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mounted archive the pod cannot write (here the kernel's EROFS, as a claim mounted
    read-only gives it) fails the item in stage-in, naming the record and the fix, not
    at its end in the sidecar's log after the work."""
    env, vol = _env(tmp_path)
    monkeypatch.setattr(mounts, "wait", lambda cfg, env: None)
    monkeypatch.setattr(os, "geteuid", lambda: 65532)  # the pod's user, not root
    where = f"{MOUNT_STORAGE}/g/{KEY}"

    def read_only(self: DirStore, key: str, data: bytes) -> None:
        raise OSError(errno.EROFS, "Read-only file system", where)

    monkeypatch.setattr(DirStore, "put_bytes", read_only)
    said: list[str] = []
    monkeypatch.setattr(main, "termination_message", said.append)
    assert main.cmd_stage_in(env) == 1  # not 75: a retry meets the same mount
    assert said == [
        f"stage-in failed (exit 1): archive (g: {vol}/{KEY}): task record not written: "
        f"OSError: [Errno 30] Read-only file system: '{where}'; a mounted storage is "
        "read-only here: mount its claim or export read-write (the PersistentVolume's "
        "access mode, the NFS export)"]
    assert not (tmp_path / "pod" / "work" / ".nightshift" / "stagein.json").exists()


def test_a_moments_fault_writing_the_first_record_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, _ = _env(tmp_path)
    monkeypatch.setattr(mounts, "wait", lambda cfg, env: None)
    monkeypatch.setattr(os, "geteuid", lambda: 65532)

    def io_error(self: DirStore, key: str, data: bytes) -> None:
        raise OSError(errno.EIO, "Input/output error", f"{MOUNT_STORAGE}/g/{key}")

    monkeypatch.setattr(DirStore, "put_bytes", io_error)
    assert main.cmd_stage_in(env) == main.EX_TEMPFAIL


def test_an_archive_prefix_outside_its_storage_is_a_configuration_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Containment refuses the key (exit 78, as for an item's path), and nothing is
    written beside the storage's root."""
    env, vol = _env(tmp_path)
    cfg = json.loads(env["NIGHTSHIFT_RUNNER_CONFIG"])
    cfg["archive"]["prefix"] = "../escape"
    env["NIGHTSHIFT_RUNNER_CONFIG"] = json.dumps(cfg)
    monkeypatch.setattr(mounts, "wait", lambda cfg, env: None)
    monkeypatch.setattr(os, "geteuid", lambda: 65532)
    assert main.cmd_stage_in(env) == main.EX_CONFIG
    assert not (vol.parent / "escape").exists()


def test_a_root_stage_in_leaves_a_mounted_archive_to_the_sidecar(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage-in runs as root only to fill the node cache: a record (or folder) it made
    in a mounted archive would be root's, and the sidecar, as the pod's user, could write
    none of the stage's records after it. It still reads the previous one."""
    env, vol = _env(tmp_path)
    before = (vol / KEY).read_text()
    monkeypatch.setattr(mounts, "wait", lambda cfg, env: None)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert main.cmd_stage_in(env) == 0
    assert (vol / KEY).read_text() == before
    stats = json.loads((tmp_path / "pod" / "work" / ".nightshift" / "stagein.json").read_text())
    assert stats["attempt"] == 2


def _refuse_reads(monkeypatch: pytest.MonkeyPatch, times: int | None) -> None:
    """Reads of the archive's records refused (EACCES) `times` times (None: always)."""
    real, left = DirStore.get_bytes, [times]

    def get_bytes(self: DirStore, key: str) -> bytes | None:
        if key.endswith(KEY) and (left[0] is None or left[0] > 0):
            if left[0] is not None:
                left[0] -= 1
            raise OSError(errno.EACCES, "Permission denied", f"{MOUNT_STORAGE}/g/{key}")
        return real(self, key)

    monkeypatch.setattr(DirStore, "get_bytes", get_bytes)


def test_an_archive_that_takes_records_but_never_gives_them_back_fails_the_item(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attempts would all be numbered 1 and overwrite each other's failed outputs."""
    env, _ = _env(tmp_path)
    monkeypatch.setattr(mounts, "wait", lambda cfg, env: None)
    monkeypatch.setattr(os, "geteuid", lambda: 65532)
    _refuse_reads(monkeypatch, None)
    said: list[str] = []
    monkeypatch.setattr(main, "termination_message", said.append)
    assert main.cmd_stage_in(env) == 1
    assert said[0].startswith("stage-in failed (exit 1): archive (g: ")
    assert "task record written but not readable, so attempts could not be counted: " \
        "PermissionError: [Errno 13] Permission denied" in said[0]


def test_a_refused_first_read_that_reads_back_is_a_record_not_there_yet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S3 answers 403 for a key that is not there where s3:ListBucket is not granted."""
    env, _ = _env(tmp_path)
    monkeypatch.setattr(mounts, "wait", lambda cfg, env: None)
    monkeypatch.setattr(os, "geteuid", lambda: 65532)
    _refuse_reads(monkeypatch, 1)
    assert main.cmd_stage_in(env) == 0
