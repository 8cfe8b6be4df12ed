"""/proc sampling over a process group standing in for a pod."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nightshift.runner import procstat


def test_read_own_process() -> None:
    p = procstat.read_proc(Path("/proc"), os.getpid())
    assert p is not None and p.pid == os.getpid() and p.rss > 0 and p.hwm >= p.rss // 2
    assert p.io is not None and "read_bytes" in p.io  # same uid: readable


def test_sampler_counts_group_and_reaped_children(tmp_path: Path) -> None:
    pause = subprocess.Popen(["sleep", "60"], process_group=0)
    flag = tmp_path / "go"
    # A parent that spawns a CPU-burning child, reaps it, then waits to be told to exit:
    # the child's CPU must be counted once (via the parent's cutime), not twice.
    script = (f'sh -c \'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done\'; '
              f'echo done > {tmp_path}/child-done; while [ ! -f {flag} ]; do sleep 0.1; done')
    # self_pid: this test is the steps' parent, which the sidecar never is.
    sampler = procstat.Sampler(pgid=pause.pid, self_pid=pause.pid)
    try:
        sh = subprocess.Popen(["/bin/sh", "-c", script], process_group=pause.pid)
        while not (tmp_path / "child-done").exists():
            sampler.sample()
        sampler.sample()
        sampler.sample()
        parent = procstat.read_proc(Path("/proc"), sh.pid)
        assert parent is not None
        flag.write_text("1")
        sh.wait()
        sampler.sample()
    finally:
        pause.kill()
        pause.wait()
    totals = sampler.totals()
    # Everything the group used is in the parent's own + children's counters.
    assert abs(float(totals["cpuSeconds"]) - parent.cpu) <= 0.05 + parent.cpu * 0.1  # type: ignore[arg-type]
    assert parent.cpu > 0
    assert int(totals["peakRssBytes"]) > 0  # type: ignore[call-overload]
    assert pause.pid not in {k[0] for k in sampler.last}  # the "pause" process is not counted


def test_open_files_sees_an_open_descriptor(tmp_path: Path) -> None:
    f = (tmp_path / "out.txt").open("w")
    try:
        found = procstat.open_files(Path("/proc"), [os.getpid()], tmp_path)
        assert found == {str((tmp_path / "out.txt").resolve())}
    finally:
        f.close()
    assert procstat.open_files(Path("/proc"), [os.getpid()], tmp_path) == set()
