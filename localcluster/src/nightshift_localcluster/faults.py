"""Fault drills on the running local cluster: stop a part, keep it down, start it again.

`nightshift-localcluster restart kube-apiserver --down-for 5` (or etcd, karpenter, ...)
stops the process `up` started (SIGTERM, or SIGKILL with --kill), waits, and starts the
same command line with the same environment (read from /proc before stopping), then
records the new PID in state.json so `down` and `status` still know it. For
`revive_for` seconds after, any other part that exits is started again (a part that
ends itself on a lost leader lease would otherwise stay down; the MPI Operator, which
does, also runs under supervise.py, which restarts it whenever it exits). The suite's fault
tests (tests/integration/test_faults.py) restart the API server and etcd under a
running stage this way.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

from nightshift_localcluster import cluster, procs
from nightshift_localcluster.paths import Layout, LocalClusterError


def _cmdline(pid: int) -> tuple[list[str], dict[str, str]]:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    env: dict[str, str] = {}
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return [a.decode(errors="replace") for a in argv], env


def restart(layout: Layout, name: str, down_for: float = 0.0, kill: bool = False,
            say: cluster.Say = print, revive_for: float = 30.0) -> procs.Proc:
    state = cluster.load_state(layout)
    if state is None:
        raise LocalClusterError("the local cluster is not running (nightshift-localcluster up)")
    found = [p for p in state.proc_objs() if p.name == name]
    if not found:
        names = ", ".join(p.name for p in state.proc_objs())
        raise LocalClusterError(f"no part named {name!r}; parts: {names}")
    old = found[0]
    if not procs.alive(old):
        raise LocalClusterError(f"{name} (pid {old.pid}) is not running; see {old.log}")
    argv, env = _cmdline(old.pid)
    # Every part's command line, for the ones that exit rather than wait when the API
    # server or etcd is gone (the MPI Operator ends itself when it cannot renew its
    # leader lease; in a cluster its Deployment restarts it, here we do).
    others = {p.name: _cmdline(p.pid) for p in state.proc_objs()
              if p.name != name and procs.alive(p)}
    # Down from the signal on: a part stops serving at SIGTERM (the API server closes its
    # listener at once), however long its graceful end then takes (procs.stop waits up
    # to 10 s; the API server's took all of it, still draining).
    since = time.monotonic()
    if kill:
        os.kill(old.pid, signal.SIGKILL)
    procs.stop(old)
    stopping = time.monotonic() - since
    say(f"{name} stopped (pid {old.pid}{', SIGKILL' if kill else ''}) in {stopping:.1f}s; "
        f"down for {max(down_for, stopping):.1f}s")
    time.sleep(max(0.0, down_for - stopping))
    # The same environment, not ours: a component's settings (Karpenter's) live there.
    new = procs.start(name, argv, Path(old.log).parent, env)
    new = replace(new, exe=old.exe)
    state.processes = [vars(new).copy() if p["name"] == name else p for p in state.processes]
    cluster.save_state(layout, state)
    say(f"{name} started again (pid {new.pid})")
    _revive(layout, others, revive_for, say)
    return new


def _revive(layout: Layout, cmdlines: dict[str, tuple[list[str], dict[str, str]]],
            seconds: float, say: cluster.Say) -> None:
    """For `seconds`, start again any part that exits (as a supervisor would)."""
    deadline = time.monotonic() + seconds
    while True:
        state = cluster.load_state(layout)
        if state is None:
            return
        changed = False
        for i, p in enumerate(state.proc_objs()):
            if p.name in cmdlines and not procs.alive(p):
                argv, env = cmdlines[p.name]
                new = replace(procs.start(p.name, argv, Path(p.log).parent, env), exe=p.exe)
                state.processes[i] = vars(new).copy()
                changed = True
                say(f"{p.name} had exited; started again (pid {new.pid})")
        if changed:
            cluster.save_state(layout, state)
        if time.monotonic() >= deadline:
            return
        time.sleep(0.5)
