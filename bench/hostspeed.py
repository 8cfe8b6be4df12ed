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

import contextlib
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


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave to others while this VM wanted them (/proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


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


def probe(out: Path) -> None:
    parent = os.getppid()
    with out.open("a") as f:
        # Until stopped, or until the bench that started it is gone (a failed run).
        while os.getppid() == parent:
            f.write(f"{chunk():.3f}\n")
            f.flush()
            time.sleep(PERIOD_S)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        probe(Path(sys.argv[2]))
        return 0
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
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
