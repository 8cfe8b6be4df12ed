"""record.node_info: IMDS first, then the Node's labels through kube.py, then nulls."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nightshift import kube
from nightshift.api import names
from nightshift.runner import record

NODE = "ip-10-0-0-1"


@pytest.fixture
def in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    (tmp_path / "token").write_text("t")
    monkeypatch.setattr(record, "SA_DIR", tmp_path)
    # IMDS disabled: the node-label fallback is what is under test.
    return {names.ENV_NODE_NAME: NODE, "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            record.ENV_IMDS: ""}


def test_node_labels_come_from_kube(in_cluster: dict[str, str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def labels(name: str, timeout: float = 2) -> dict[str, str]:
        asked.append(name)
        return {record.LABEL_INSTANCE_TYPE: "m7i.large", record.LABEL_CAPACITY_TYPE: "spot",
                "topology.kubernetes.io/zone": "eu-west-1a"}

    monkeypatch.setattr(kube, "node_labels", labels)
    assert record.node_info(in_cluster) == {
        "node": NODE, "instanceType": "m7i.large", "capacityType": "spot",
        "zone": "eu-west-1a", "source": "node-labels"}
    assert asked == [NODE]


def test_api_errors_leave_nulls(in_cluster: dict[str, str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(name: str, timeout: float = 2) -> dict[str, str]:
        raise kube.KubeError(403, "Forbidden", "nodes is forbidden")

    monkeypatch.setattr(kube, "node_labels", forbidden)
    info = record.node_info(in_cluster)
    assert {k: v for k, v in info.items() if k != "sourceError"} == {
        "node": NODE, "instanceType": None, "capacityType": None, "zone": None,
        "source": None}
    # ... and says why, with the binding that gives one.
    assert str(info["sourceError"]).endswith(
        "the Node's labels: 403 Forbidden: nodes is forbidden: bind the pod's ServiceAccount "
        "to the operator chart's node-reader ClusterRole (the collaboration chart's "
        "pipelines.nodeReaderClusterRole)"), info


def test_no_api_call_outside_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "node_labels", lambda *a, **k: pytest.fail("called the API"))
    info = record.node_info({names.ENV_NODE_NAME: NODE, record.ENV_IMDS: ""})
    assert info["source"] is None and info["node"] == NODE
    assert info["sourceError"] == (
        "the Node's labels: the pod has no API token: give the stage serviceAccountName "
        "(the collaboration chart's pipelines account, bound to the node reader)")


def test_runner_imports_neither_pydantic_nor_the_kubernetes_client() -> None:
    """The runner's modules stay stdlib + boto3 (runnerwire, not the pydantic models);
    the kubernetes client loads only for the node-label fallback."""
    code = ("import sys, nightshift.runner.main, nightshift.runner.sidecar; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'pydantic', 'kubernetes', 'kopf', 'yaml'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture
def api_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A stand-in API server with one Node, wired in as the in-cluster config."""
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            found = self.path == f"/api/v1/nodes/{NODE}"
            body = json.dumps({"kind": "Node", "metadata": {
                "name": NODE, "labels": {record.LABEL_CAPACITY_TYPE: "on-demand"}}}
                if found else {"kind": "Status", "reason": "NotFound", "message": "gone"})
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def incluster(client_configuration: Any) -> None:
        client_configuration.host = f"http://127.0.0.1:{server.server_port}"

    monkeypatch.setattr(kube.config, "load_incluster_config", incluster)  # type: ignore[attr-defined]
    yield paths
    server.shutdown()
    server.server_close()


def test_kube_node_labels_reads_the_node(api_server: list[str]) -> None:
    assert kube.node_labels(NODE) == {record.LABEL_CAPACITY_TYPE: "on-demand"}
    with pytest.raises(kube.KubeError, match="404"):
        kube.node_labels("other")
    assert api_server == [f"/api/v1/nodes/{NODE}", "/api/v1/nodes/other"]


def test_kube_imports_with_only_what_the_runner_image_installs() -> None:
    """images/runner/Dockerfile installs boto3, kubernetes (with its own dependencies:
    PyYAML, pydantic in recent releases) and prometheus-client, the package --no-deps."""
    code = """
import importlib.abc, sys
MISSING = {"kopf", "rich"}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in MISSING:
            raise ImportError(f"{name} is not in the runner image")
sys.meta_path.insert(0, Refuse())
import nightshift.kube, nightshift.runner.record
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
