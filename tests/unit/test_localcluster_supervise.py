"""supervise.py: the local cluster's stand-in for a Deployment restarting the MPI Operator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from nightshift_localcluster import supervise
from tests.clusterutil import wait_for


def _supervise(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "nightshift_localcluster.supervise", *argv],
                            stderr=subprocess.PIPE)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def test_a_program_that_exits_is_started_again_until_sigterm(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sup = _supervise("sh", "-c", f'echo $$ >> {runs}; exit 3')
    wait_for("a second start", lambda: runs.exists() and len(runs.read_text().split()) >= 2,
             20, interval=0.1)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(10) == 0
    assert sup.stderr is not None
    assert b"sh exited (3); starting it again in 1 s" in sup.stderr.read()


def _sleeper(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A supervised program that stays up, and its PID once it runs."""
    pidfile = tmp_path / "pid"
    sup = _supervise("sh", "-c", f'echo $$ > {pidfile}; exec sleep 60')
    wait_for("the program", lambda: pidfile.exists() and pidfile.read_text().strip(), 20,
             interval=0.1)
    return sup, int(pidfile.read_text())


def test_sigterm_stops_the_program_and_then_the_supervisor(tmp_path: Path) -> None:
    sup, pid = _sleeper(tmp_path)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(10) == 0
    wait_for("the program gone", lambda: not _alive(pid), 10, interval=0.1)


def test_the_program_does_not_outlive_a_killed_supervisor(tmp_path: Path) -> None:
    sup, pid = _sleeper(tmp_path)
    os.kill(sup.pid, signal.SIGKILL)
    sup.wait(10)
    wait_for("the program to end with its supervisor", lambda: not _alive(pid), 10,
             interval=0.1)


def test_quick_exits_back_off_and_a_steady_run_resets_the_delay() -> None:
    delays = [supervise.RESTART_DELAY / 2]
    for _ in range(7):
        delays.append(supervise.next_delay(delays[-1], uptime=0.5))
    assert delays[1:] == [1, 2, 4, 8, 16, 30, 30]
    assert supervise.next_delay(30, uptime=supervise.STEADY_SECONDS) == 1


def test_a_program_failing_at_start_is_not_started_every_second(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sup = _supervise("sh", "-c", f'echo $$ >> {runs}; exit 1')
    wait_for("a third start", lambda: runs.exists() and len(runs.read_text().split()) >= 3,
             20, interval=0.1)
    sup.send_signal(signal.SIGTERM)  # during the 4-s wait before the fourth start
    assert sup.wait(3) == 0, "a stop during a long delay does not wait it out"
    assert sup.stderr is not None
    said = sup.stderr.read()
    assert b"starting it again in 1 s" in said and b"starting it again in 2 s" in said
    assert len(runs.read_text().split()) == 3
