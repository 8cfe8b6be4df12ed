"""The task record's failedStep names a step only when that step failed; a commit that
failed after every step succeeded is the record's error, with no step blamed.

Found by an audit: the record named the last step (exit 0) as failedStep when only the
commit had failed.
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner import stepsh
from nightshift.runner.config import Item, Paths
from nightshift.runner.sidecar import Sidecar
from tests.unit.runner_s3 import bucket, config, get_json, stores, write

ENV = {"NIGHTSHIFT_IMDS_ENDPOINT": "", "NIGHTSHIFT_LAST_STEP": "last",
       "PATH": "/usr/bin:/bin"}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def item_ends(s3: Any, tmp_path: Path, step_cmd: str) -> tuple[int, dict[str, Any]]:
    """One item: the last step runs `step_cmd`; its exit code and the task record."""
    cfg = dataclasses.replace(
        config([], [{"storage": "data", "path": "out/{item}/"}], archive=True),
        sample_processes=False)
    paths = Paths(tmp_path / "pod")
    for d in (paths.work, paths.inputs, paths.outputs, paths.tmp, paths.state):
        d.mkdir(parents=True, exist_ok=True)
    stepsh.install(paths.bin, paths.state)
    write(paths.outputs, "x.txt", b"x")
    step = subprocess.Popen(["/bin/sh", str(paths.bin / "step"), "last", "--", "/bin/sh",
                             "-c", step_cmd], env=ENV, stderr=subprocess.DEVNULL)
    sc = Sidecar(cfg, paths, Item("n1", 0, 0), stores(cfg, s3), ENV)
    rc: list[int] = []

    def step_then_sigterm() -> None:
        try:
            rc.append(step.wait(timeout=20))
        finally:
            sc.stop.set()

    threading.Thread(target=step_then_sigterm, daemon=True).start()
    sc.run()
    return rc[0], get_json(s3, "proj/_nightshift/r/s/0.json")


def test_a_failed_commit_blames_no_step(s3: Any, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(self: S3Store, local: Path, key: str, sha: str) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(S3Store, "put_file", disk_full)
    rc, rec = item_ends(s3, tmp_path, "exit 0")
    assert rc == 75
    assert [(s["name"], s["exitCode"]) for s in rec["steps"]] == [("last", 0)]
    assert (rec["phase"], rec["exitCode"], rec["failedStep"]) == ("failed", 75, None)
    assert rec["error"] == "OSError: [Errno 28] No space left on device"


def test_a_failed_step_is_named(s3: Any, tmp_path: Path) -> None:
    rc, rec = item_ends(s3, tmp_path, "exit 3")
    assert rc == 3
    assert (rec["phase"], rec["exitCode"], rec["failedStep"]) == ("failed", 3, "last")
