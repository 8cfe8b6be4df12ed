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
it never outlives it.
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
    while not stopping:
        # preexec_fn is unsafe only with threads; this process has one.
        child = subprocess.Popen(argv, preexec_fn=lambda: _die_with_parent(me))  # noqa: PLW1509
        if stopping:  # told to stop while it was being started
            child.terminate()
        rc = child.wait()
        if stopping:
            break
        print(f"supervise: {argv[0]} exited ({rc}); starting it again in "
              f"{RESTART_DELAY:g} s", file=sys.stderr, flush=True)
        time.sleep(RESTART_DELAY)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
