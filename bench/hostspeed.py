"""How fast this machine's cores were during a run, measured beside it.

On the 2-vCPU VM the benches run on, the same pure-Python loop took 0.109 to 0.212 s
from one second to the next on an idle machine (60 samples, 2026-11-27): the host
shares its cores, and a vCPU's speed moves with what else runs on them. A fan-out run
keeps both cores busy, so its time is its cluster's CPU seconds over two, and a slow
stretch of host makes the same work cost more CPU seconds in every part at once.

A probe process beside the run does a fixed chunk of work every 0.2 s and records the
chunk's CPU time (`time.thread_time`: time on a core only, so waiting for a core under
the cluster's load does not count, and a slower core does). A run's `chunk_ms` is the
median over the run. The probe costs about 3 % of one core, the same on both sides of a
pair. Run alone, `python bench/hostspeed.py 60` prints a minute of samples.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHUNK_LOOPS = 150_000  # about 5 ms of one core here
PERIOD_S = 0.2


def chunk() -> float:
    """CPU milliseconds one fixed piece of interpreter work takes now."""
    t = time.thread_time()
    x = 0
    for i in range(CHUNK_LOOPS):
        x += i
    return (time.thread_time() - t) * 1000


def cpu_seconds_by_state() -> list[float]:
    """/proc/stat's all-cores line in seconds since boot: user, nice, system, idle,
    iowait, irq, softirq, steal, ..."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return [int(x) / os.sysconf("SC_CLK_TCK") for x in fields]


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave to others while this VM wanted them."""
    states = cpu_seconds_by_state()
    return states[7] if len(states) > 7 else 0.0


class HostSpeed:
    """The probe as a child process, writing one chunk's CPU ms per line to a file."""

    def __init__(self, nice: int = 0) -> None:
        self.nice = nice
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = Path(tempfile.mkstemp(prefix="hostspeed-", suffix=".txt")[1])
        self.steal0 = 0.0

    def start(self) -> None:
        self.steal0 = steal_seconds()
        self.proc = subprocess.Popen([sys.executable, __file__, "--probe", str(self.out)])
        # Not allowed to raise its priority: the probe still samples, less often.
        if self.nice:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self.proc.pid, self.nice)

    def stop(self) -> dict[str, Any]:
        """The run's median chunk, how many samples, and the steal meanwhile."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None
        samples = [float(x) for x in self.out.read_text().split()]
        self.out.unlink(missing_ok=True)
        return {"chunk_ms": round(statistics.median(samples), 3) if samples else None,
                "samples": len(samples),
                "steal_s": round(steal_seconds() - self.steal0, 1)}


def _solve(rows: list[list[float]], y: list[float]) -> list[float]:
    """Least squares by the normal equations (a few parameters, a few dozen runs)."""
    k = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(k)]
         + [sum(r[i] * v for r, v in zip(rows, y, strict=True))] for i in range(k)]
    for i in range(k):
        pivot = m[i][i]
        m[i] = [v / pivot for v in m[i]]
        for r in range(k):
            if r != i:
                f = m[r][i]
                m[r] = [a - f * b for a, b in zip(m[r], m[i], strict=True)]
    return [m[i][k] for i in range(k)]


def _resid_sd(rows: list[list[float]], y: list[float], beta: list[float]) -> float:
    res = [v - sum(b * x for b, x in zip(beta, r, strict=True))
           for r, v in zip(rows, y, strict=True)]
    return math.sqrt(sum(e * e for e in res) / max(1, len(y) - len(beta)))


def side_ratio_fit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Every run's log time fitted on its side and its log host chunk: bare / run with
    the host's speed held equal, how time follows the chunk (1: in proportion), and the
    spread left unexplained with and without the chunk (lower: the probe explains it).
    A cross-check on the per-pair division, which assumes a proportion of exactly 1."""
    y = [math.log(float(r["done_s"])) for r in runs]
    side = [1.0 if r["side"] == "run" else 0.0 for r in runs]
    chunk = [math.log(float(r["host"]["chunk_ms"])) for r in runs]
    with_chunk = [[1.0, s, c] for s, c in zip(side, chunk, strict=True)]
    alone = [[1.0, s] for s in side]
    b, b0 = _solve(with_chunk, y), _solve(alone, y)
    return {"ratio": round(math.exp(-b[1]), 3), "chunk_elasticity": round(b[2], 2),
            "resid_sd": round(_resid_sd(with_chunk, y, b), 4),
            "ratio_without_chunk": round(math.exp(-b0[1]), 3),
            "resid_sd_without_chunk": round(_resid_sd(alone, y, b0), 4)}


def probe(out: Path) -> None:
    parent = os.getppid()
    with out.open("a") as f:
        # Until stopped, or until the bench that started it is gone (a failed run).
        while os.getppid() == parent:
            f.write(f"{chunk():.3f}\n")
            f.flush()
            time.sleep(PERIOD_S)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":  # the probe a bench starts
        probe(Path(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description="Sample this machine's core speed: the CPU "
                                 "time of a fixed chunk of work, every 0.2 s.")
    ap.add_argument("seconds", nargs="?", type=int, default=60,
                    help="how long to sample (default 60)")
    seconds = ap.parse_args().seconds
    samples = []
    for _ in range(int(seconds / PERIOD_S)):
        samples.append(chunk())
        time.sleep(PERIOD_S)
    q = statistics.quantiles(samples, n=10)
    print(f"{len(samples)} chunks: min {min(samples):.2f} ms, p10 {q[0]:.2f}, "
          f"median {statistics.median(samples):.2f}, p90 {q[-1]:.2f}, max {max(samples):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
