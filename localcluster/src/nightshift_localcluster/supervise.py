"""Run a command again whenever it exits, until told to stop: what a Deployment does for
a controller in a real cluster, for the one part here that ends itself.

The MPI Operator exits (klog.Fatalf) when it cannot renew its leader Lease within 5 s,
a deadline compiled into it (`renewDuration`, cmd/mpi-operator/app/server.go). On this
two-core bed one slow API answer under the integration suite's load is enough; in a
cluster its Deployment starts it again, here nothing did, and every later MPI stage
waited on an MPIJob nobody acted on.

`python -m nightshift_localcluster.supervise PROGRAM ARGS...`: SIGTERM or SIGINT stops
the program and then the supervisor; the program gets SIGKILL if the supervisor is
killed outright (PR_SET_PDEATHSIG: `down` kills a part that has not ended in 10 s), so
it never outlives it. A program that keeps exiting within 10 s of its start is started
again after a delay that doubles each time, up to 30 s (the kubelet's CrashLoopBackOff,
scaled to a test bed), so a binary that cannot start is not run every second; one that
ran longer (the MPI Operator losing its lease under load) comes back after 1 s.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

PR_SET_PDEATHSIG = 1
RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0
# A run at least this long was healthy: the next restart waits RESTART_DELAY again.
STEADY_SECONDS = 10.0


def next_delay(delay: float, uptime: float) -> float:
    """The wait before the next start, after a run of `uptime` s that followed `delay`."""
    if uptime >= STEADY_SECONDS:
        return RESTART_DELAY
    return min(delay * 2, MAX_RESTART_DELAY)


def _die_with_parent(parent: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the supervisor died before the line above took hold
        os._exit(1)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m nightshift_localcluster.supervise PROGRAM [ARGS...]",
              file=sys.stderr)
        return 2
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    me = os.getpid()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    delay = RESTART_DELAY / 2  # the first quick exit waits RESTART_DELAY
    while not stopping:
        started = time.monotonic()
        # preexec_fn is unsafe only with threads; this process has one.
        child = subprocess.Popen(argv, preexec_fn=lambda: _die_with_parent(me))  # noqa: PLW1509
        if stopping:  # told to stop while it was being started
            child.terminate()
        rc = child.wait()
        if stopping:
            break
        delay = next_delay(delay, time.monotonic() - started)
        print(f"supervise: {argv[0]} exited ({rc}); starting it again in "
              f"{delay:g} s", file=sys.stderr, flush=True)
        # In short sleeps, so a stop during a long delay is not kept waiting (`down`
        # gives a part 10 s).
        until = time.monotonic() + delay
        while not stopping and time.monotonic() < until:
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
