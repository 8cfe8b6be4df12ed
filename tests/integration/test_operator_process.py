"""The operator process: health endpoint, clean stop on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from nightshift_localcluster.procs import free_port
from tests.clusterutil import wait_for
from tests.integration.conftest import NAMESPACE_GLOB, Cluster


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def test_health_endpoint_and_clean_sigterm(cluster: Cluster, crds: list[str],
                                           tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nightshift.cli.main", "operator", "--health-port",
             str(port), "--health-host", "127.0.0.1", "--namespace", NAMESPACE_GLOB],
            stdout=out, stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", **cluster.operator_env()})
    try:
        wait_for("GET /healthz to answer 200", lambda: _healthy(port), 60)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, log.read_text()[-2000:]
    assert not _healthy(port)
