"""The POSIX sh step wrapper, run with /bin/sh: exit codes, the commit hand-off."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from nightshift.runner import stepsh
from nightshift.runner.commit import fifo_signal
from nightshift.runner.sidecar import read_request, step_times


@pytest.fixture
def step(tmp_path: Path) -> Path:
    return stepsh.install(tmp_path / "bin", tmp_path / "state")


def run(step: Path, name: str, cmd: str, last: str = "last") -> subprocess.Popen[bytes]:
    env = {**os.environ, "NIGHTSHIFT_LAST_STEP": last}
    return subprocess.Popen(["/bin/sh", str(step), name, "--", "/bin/sh", "-c", cmd], env=env)


def sidecar(state: Path, result: str) -> threading.Thread:
    """Answer the first commit request like the commit sidecar would."""

    def go() -> None:
        while read_request(state) is None:
            threading.Event().wait(0.02)
        fifo_signal(state / stepsh.FIFO, result, stop=30)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_successful_middle_step_does_not_commit(step: Path, tmp_path: Path) -> None:
    assert run(step, "first", "echo hi >/dev/null").wait(30) == 0
    assert read_request(tmp_path / "state") is None
    [entry] = step_times(tmp_path / "state")
    assert entry["name"] == "first" and entry["exitCode"] == 0


@pytest.mark.parametrize(("cmd", "result", "rc"), [
    ("exit 0", "ok", 0),
    ("exit 0", "failed", 75),   # the user succeeded, the commit did not: retryable
    ("exit 3", "ok", 3),        # the user's code reaches podFailurePolicy
    ("exit 3", "failed", 3),
    ("kill -KILL $$", "ok", 137),
])
def test_last_or_failed_step_waits_for_commit(step: Path, tmp_path: Path, cmd: str,
                                              result: str, rc: int) -> None:
    proc = run(step, "last", cmd)
    t = sidecar(tmp_path / "state", result)
    assert proc.wait(30) == rc
    t.join(5)
    req = read_request(tmp_path / "state")
    assert req is not None and req[0] == "last" and req[1] == (rc if rc != 75 else 0)


def test_step_blocks_until_the_sidecar_answers(step: Path, tmp_path: Path) -> None:
    proc = run(step, "mid", "exit 4")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(1.5)  # no answer yet: still waiting on the FIFO
    fifo_signal(tmp_path / "state" / stepsh.FIFO, "ok", stop=10)
    assert proc.wait(30) == 4


def test_sigterm_reaches_the_step(step: Path, tmp_path: Path) -> None:
    proc = run(step, "last", "trap 'exit 42' TERM; while :; do sleep 0.1; done")
    while not (tmp_path / "state" / "steps" / "last.start").exists():
        threading.Event().wait(0.02)
    threading.Event().wait(0.3)
    t = sidecar(tmp_path / "state", "ok")
    proc.terminate()
    assert proc.wait(30) == 42
    t.join(5)


def test_script_uses_only_builtins(step: Path) -> None:
    # No date/sleep/mv/cat: user images promise /bin/sh and nothing more.
    text = step.read_text()
    for tool in ("date ", "sleep ", "mv ", "cat ", "mkdir "):
        assert tool not in text
    proc = subprocess.run(["/bin/sh", "-n", str(step)], check=False)
    assert proc.returncode == 0


@pytest.mark.parametrize(("result", "said"), [
    ("failed PermissionError: s3://products/out/ is not writable",
     "nightshift: committing outputs failed: PermissionError: s3://products/out/ is not "
     "writable"),
    ("failed", "nightshift: committing outputs failed: see the commit container's log"),
])
def test_a_failed_commit_says_why_last(step: Path, tmp_path: Path, result: str,
                                       said: str) -> None:
    # The step's last stderr line is its termination message (FallbackToLogsOnError),
    # so the run's failure sample carries the commit's reason.
    env = {**os.environ, "NIGHTSHIFT_LAST_STEP": "last"}
    proc = subprocess.Popen(["/bin/sh", str(step), "last", "--", "true"], env=env,
                            stderr=subprocess.PIPE)
    t = sidecar(tmp_path / "state", result)
    _, err = proc.communicate(timeout=30)
    t.join(5)
    assert proc.returncode == 75
    assert err.decode().strip().splitlines()[-1] == said
