"""Processes started by PID, on free loopback ports, with logs kept; stopped only by PID."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightshift_localcluster.paths import LocalClusterError

# Listening ports come from below the kernel's ephemeral range. A port the kernel picks
# for bind(0) is from that range, so between this check and the bind of the part that
# gets it, it could be handed to any outgoing connection (etcd's, the API server's, a
# test's) as its local port: `up` then failed with "address already in use" (seen here).
# Below the range the kernel never hands a port out on its own. Kubernetes' NodePort
# range (30000-32767) is left out too: the real node's kube-proxy routes those ports on
# the bridge's gateway address, where the parts pods reach listen, to Services.
PORT_FLOOR = 20000
NODE_PORTS = 30000
_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_given: set[int] = set()


def ephemeral_low() -> int:
    try:
        return int(_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` nothing listens on, never one this process gave out before."""
    low = min(ephemeral_low(), NODE_PORTS)
    if low - PORT_FLOOR >= 1000:
        for _ in range(200):
            port = PORT_FLOOR + secrets.randbelow(low - PORT_FLOOR)
            if port in _given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _given.add(port)
            return port
    # A machine whose ephemeral range starts low: the kernel's pick, as before.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    _given.add(port)
    return port


# Children started by this process: poll() is the reliable liveness check for them.
# /proc/<pid>/cmdline can lag just after exec (seen under gVisor), so it only serves
# for PIDs recorded by an earlier process (`down` from another shell).
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    exe: str
    log: str


def start(
    name: str, argv: Sequence[str], log_dir: Path, env: Mapping[str, str] | None = None
) -> Proc:
    """Start a component detached from our session so Ctrl-C on the CLI leaves it alone."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    full_env = {**os.environ, **(env or {})}
    with log.open("ab") as out:
        p = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=True,
        )
    _children[p.pid] = p
    return Proc(name=name, pid=p.pid, exe=str(argv[0]), log=str(log))


def alive(proc: Proc) -> bool:
    """True when the PID still runs the same executable (PIDs get reused)."""
    child = _children.get(proc.pid)
    if child is not None:
        return child.poll() is None
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return cmdline.split(b"\0", 1)[0].decode(errors="replace") == proc.exe


def stop(proc: Proc, timeout: float = 10.0) -> None:
    if not alive(proc):
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(proc):
            _reap(proc.pid)
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    _reap(proc.pid)


def _reap(pid: int) -> None:
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(5)
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    proc: Proc | None = None,
    interval: float = 0.2,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and not alive(proc):
            raise LocalClusterError(
                f"{proc.name} exited while waiting for {what}; last lines of {proc.log}:\n"
                f"{tail(proc.log)}"
            )
        time.sleep(interval)
    where = f"; see {proc.log}" if proc else ""
    raise LocalClusterError(f"timed out after {timeout:.0f}s waiting for {what}{where}")


def http_ok(url: str, ca: Path | None = None, token: str | None = None) -> bool:
    ctx: ssl.SSLContext | None = None
    if url.startswith("https"):
        # Without a CA: a yes/no probe of a loopback component's self-signed serving cert
        # (kube-controller-manager, kube-scheduler); callers that send a token pass the CA.
        ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()  # noqa: S323  (see above)
    req = urllib.request.Request(url)  # noqa: S310  (the test bed's own http(s) URLs)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as r:  # noqa: S310  (the test bed's own http(s) URLs)
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False
