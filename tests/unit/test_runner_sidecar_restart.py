"""A commit sidecar restarted after its commit hands the step its result again.

Found by an audit: a sidecar that died between writing `commit.result` and writing the
FIFO (OOM, a node under pressure) was restarted by the kubelet, found the result and
only idled; the step, blocked reading the FIFO, never ended.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner import sidecar as sidecar_mod
from nightshift.runner import stepsh
from nightshift.runner.config import Item, Paths
from nightshift.runner.sidecar import Sidecar
from tests.unit.runner_s3 import bucket, config, keys, stores, write

ITEM = Item("n1", 0, 0)
ENV = {"NIGHTSHIFT_IMDS_ENDPOINT": "", "NIGHTSHIFT_LAST_STEP": "last",
       "PATH": "/usr/bin:/bin"}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


class Killed(BaseException):
    """The sidecar's process killed (SIGKILL) at this point."""


def pod(tmp_path: Path) -> tuple[Paths, subprocess.Popen[str]]:
    paths = Paths(tmp_path / "pod")
    for d in (paths.work, paths.inputs, paths.outputs, paths.tmp, paths.state):
        d.mkdir(parents=True, exist_ok=True)
    stepsh.install(paths.bin, paths.state)
    write(paths.outputs, "x.txt", b"x")
    step = subprocess.Popen(["/bin/sh", str(paths.bin / "step"), "last", "--", "true"],
                            env=ENV, stderr=subprocess.PIPE, text=True)
    return paths, step


def killed_before_the_fifo(s3: Any, paths: Paths, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = dataclasses.replace(config([], [{"storage": "data", "path": "out/{item}/"}]),
                              sample_processes=False)

    def killed(*args: Any, **kwargs: Any) -> bool:
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(sidecar_mod, "fifo_signal", killed)
        with pytest.raises(Killed):
            Sidecar(cfg, paths, ITEM, stores(cfg, s3), ENV).run()


def restarted(s3: Any, paths: Paths, step: subprocess.Popen[str]) -> int | None:
    """The kubelet's restart of the sidecar; the step's exit code, None if it hangs."""
    cfg = dataclasses.replace(config([], [{"storage": "data", "path": "out/{item}/"}]),
                              sample_processes=False)
    sc = Sidecar(cfg, paths, ITEM, stores(cfg, s3), ENV)
    rc: list[int] = []

    def step_then_sigterm() -> None:
        try:
            rc.append(step.wait(timeout=10))
        except subprocess.TimeoutExpired:
            step.kill()
            step.wait()
        finally:
            sc.stop.set()  # the kubelet's SIGTERM once the steps are done

    threading.Thread(target=step_then_sigterm, daemon=True).start()
    assert sc.run() == 0  # in the main thread: it sets signal handlers
    return rc[0] if rc else None


def test_a_sidecar_restarted_after_its_commit_releases_the_step(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths, step = pod(tmp_path)
    killed_before_the_fifo(s3, paths, monkeypatch)
    assert (paths.state / "commit.result").read_text() == "ok\n"
    assert "proj/out/n1/_SUCCESS" in keys(s3, "proj/out/n1/")
    assert restarted(s3, paths, step) == 0


def test_a_failed_commits_words_reach_the_step_after_a_restart(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths, step = pod(tmp_path)

    def refused(self: S3Store, local: Path, key: str, sha: str) -> Any:
        raise PermissionError(13, "refused by the test")

    monkeypatch.setattr(S3Store, "put_file", refused)
    killed_before_the_fifo(s3, paths, monkeypatch)
    assert restarted(s3, paths, step) == 75
    assert step.stderr is not None
    assert step.stderr.read().strip().splitlines()[-1] == (
        "nightshift: committing outputs failed: PermissionError: [Errno 13] refused by the test")


def test_a_restarted_sidecar_whose_step_has_its_result_ends_on_sigterm(
        s3: Any, tmp_path: Path) -> None:
    paths = Paths(tmp_path / "pod")
    stepsh.install(paths.bin, paths.state)
    (paths.state / "commit.result").write_text("ok\n")  # no step reads the FIFO any more
    cfg = config([], [])
    sc = Sidecar(cfg, paths, ITEM, stores(cfg, s3), ENV)
    threading.Timer(0.5, sc.stop.set).start()
    assert sc.run() == 0
    assert os.path.exists(paths.state / "commit.fifo")
