"""A fresh local cluster for every timed run (`bench/fanout.py --fresh-cluster`).

A drain leaves no pod behind, but the cluster still carries the runs before: etcd's
history and its database file, the API server's watch cache and the Go heaps of every
part. Restarting the whole local cluster (`nightshift-localcluster down`, then `up`,
which starts etcd from an empty directory) before each run makes every run start from
the same state; on this machine it takes about 10 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from jobbench import Bench, console, prepared

CLI = Path(sys.executable).parent / "nightshift-localcluster"


def localcluster(*args: str, env: dict[str, str] | None = None,
                 prefix: Sequence[str] = ()) -> None:
    """`nightshift-localcluster ARGS` without the caller's KUBECONFIG (the cluster's own
    is in its state directory), `prefix` before it (e.g. taskset); raises with its
    output if it fails."""
    base = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    r = subprocess.run([*prefix, str(CLI), *args], env=base | (env or {}),
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"nightshift-localcluster {' '.join(args)} failed "
                           f"(rc {r.returncode}):\n{r.stdout}{r.stderr}")


def restarted(nodes: int, namespaces: Sequence[str], renice: int, profiling: bool) -> Bench:
    """Down, up (no real node: the bench runs on KWOK nodes), then the bench's nodes and
    namespaces, its parts reniced, and a wait until they are idle."""
    localcluster("down")
    localcluster("up", "--no-real-node", *(["--profiling"] if profiling else []))
    bench = prepared(nodes, namespaces, renice)
    waited = bench.quiet()
    console.print(f"  a fresh cluster, idle after {waited:.0f} s")
    return bench
