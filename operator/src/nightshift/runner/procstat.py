"""Sample /proc once a second for the user's processes (CPU, memory, I/O), like `sar`.

The commit sidecar shares the pod's PID namespace (shareProcessNamespace: true), so it
sees the step containers' processes but not their cgroups. CPU and I/O counters of a
process include those of the children it has reaped, and a child reaped between two
samples is gone from /proc; so the total is the sum over every process ever seen of its
last values, minus the last values of children we saw being reaped by a parent we still
see afterwards (whose counters now include them). /proc/<pid>/stat and status are world
readable; /proc/<pid>/io needs the same uid (or CAP_SYS_PTRACE), so I/O is null when no
process could be read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
IO_FIELDS = ("read_bytes", "write_bytes", "rchar", "wchar")


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # starttime in ticks: (pid, start) names a process across pid reuse
    ppid: int
    pgrp: int
    cpu: float  # own + reaped children, seconds
    rss: int
    hwm: int
    io: dict[str, int] | None

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start)


def read_proc(proc: Path, pid: int) -> Proc | None:
    base = proc / str(pid)
    try:
        stat = (base / "stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2 :].split()
    # rest[n - 3] is field n of proc(5)'s stat list.
    ticks = sum(int(rest[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    hwm = 0
    try:
        for line in (base / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    io: dict[str, int] | None = None
    try:
        io = {}
        for line in (base / "io").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in IO_FIELDS:
                io[k] = int(v)
    except OSError:
        io = None
    return Proc(pid, int(rest[19]), int(rest[1]), int(rest[2]), ticks / CLK_TCK,
                int(rest[21]) * PAGE, hwm, io)


class Sampler:
    """Call sample() once a second; totals() at any time.

    pgid: count only this process group minus its leader (tests, where a process group
    stands in for a pod and its leader for the pause process). Otherwise every process
    but PID 1 (the pod's pause process).
    """

    def __init__(self, proc: Path = Path("/proc"), pgid: int | None = None,
                 self_pid: int | None = None) -> None:
        self.proc = proc
        self.pgid = pgid
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self.last: dict[tuple[int, int], Proc] = {}
        self.alive: set[tuple[int, int]] = set()
        self.pending: dict[tuple[int, int], tuple[int, int]] = {}  # child -> parent key
        self.reaped: set[tuple[int, int]] = set()
        self.peak_rss = 0
        self.samples = 0

    def _included(self, procs: dict[int, Proc]) -> list[Proc]:
        mine = {self.self_pid}
        changed = True
        while changed:  # our own descendants (boto3 uses threads, but be safe)
            changed = False
            for p in procs.values():
                if p.ppid in mine and p.pid not in mine:
                    mine.add(p.pid)
                    changed = True
        out = []
        for p in procs.values():
            if p.pid in mine:
                continue
            if self.pgid is not None:
                if p.pgrp != self.pgid or p.pid == self.pgid:
                    continue
            elif p.pid == 1:
                continue
            out.append(p)
        return out

    def sample(self) -> None:
        procs: dict[int, Proc] = {}
        for entry in os.listdir(self.proc):
            if entry.isdigit() and (p := read_proc(self.proc, int(entry))):
                procs[p.pid] = p
        now = {p.key: p for p in self._included(procs)}
        # Children reaped last interval: subtract them once their parent's counters
        # (read now) include them; if the parent died too, its counters never will.
        for child, parent in list(self.pending.items()):
            if parent in now:
                self.reaped.add(child)
            del self.pending[child]
        for gone in self.alive - now.keys():
            g = self.last[gone]
            for parent in self.alive:
                if parent[0] == g.ppid and parent in now:
                    self.pending[gone] = parent
        self.last.update(now)
        self.alive = set(now)
        self.peak_rss = max(self.peak_rss, sum(p.rss for p in now.values()))
        self.samples += 1

    def totals(self) -> dict[str, object]:
        counted = list(self.last.values())
        subtracted = [self.last[k] for k in self.reaped]
        cpu = sum(p.cpu for p in counted) - sum(p.cpu for p in subtracted)
        readable = [p for p in counted if p.io is not None]
        io: dict[str, int | None] = {}
        for f in IO_FIELDS:
            if readable:
                io[f] = max(0, sum(p.io[f] for p in readable if p.io) -
                            sum(p.io[f] for p in subtracted if p.io))
            else:
                io[f] = None
        return {
            "cpuSeconds": round(max(cpu, 0.0), 2),
            "peakRssBytes": self.peak_rss,
            "maxProcessHwmBytes": max((p.hwm for p in self.last.values()), default=0),
            "readBytes": io["read_bytes"],
            "writeBytes": io["write_bytes"],
            "readChars": io["rchar"],
            "writeChars": io["wchar"],
            "processes": len(self.last),
            "samples": self.samples,
        }


def open_files(proc: Path, pids: list[int], under: Path) -> set[str] | None:
    """Paths under `under` some process holds open; None when a process hid its fds."""
    prefix = str(under.resolve()) + os.sep
    found: set[str] = set()
    blind = False
    for pid in pids:
        fd_dir = proc / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            continue
        except OSError:
            blind = True
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if target.startswith(prefix):
                found.add(target)
    return None if blind else found
