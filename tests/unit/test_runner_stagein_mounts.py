"""Stage-in waits for the FUSE mounts before it reads the item's previous task record:
an archive on a glusterfs storage read before its mount came would show no record (the
retry counted as attempt 1 again), and a record written there would land on the node's
own disk, under the mount."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nightshift.runner import main, mounts, record

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

    def previous(store: Any, key: str) -> dict[str, Any] | None:
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
