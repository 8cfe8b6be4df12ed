"""record.node_info's IMDS path: IMDSv2 (a PUT for a token, then GETs carrying it), and
only over http(s): the endpoint comes from the pod's env, and urlopen would open a
file: URL as readily."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from nightshift.api import names
from nightshift.runner import record

TOKEN = "tok-123"
META = {"instance-type": "c7g.large", "instance-life-cycle": "spot",
        "placement/availability-zone": "us-west-2b"}


class Imds(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        if self.path == "/latest/api/token" and \
                self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._send(200, TOKEN)
        else:
            self._send(400, "bad token request")

    def do_GET(self) -> None:
        key = self.path.removeprefix("/latest/meta-data/")
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._send(401, "no token")
        elif key in META:
            self._send(200, META[key])
        else:
            self._send(404, "")


@pytest.fixture
def imds() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Imds)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_imds_v2_answers(imds: str) -> None:
    assert record.node_info({names.ENV_NODE_NAME: "n1", record.ENV_IMDS: imds}) == {
        "node": "n1", "instanceType": "c7g.large", "capacityType": "spot",
        "zone": "us-west-2b", "source": "imds"}


@pytest.mark.parametrize("endpoint", ["file:///etc", "ftp://127.0.0.1", "/latest", "data:,x"])
def test_other_schemes_are_never_opened(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    def urlopen(req: urllib.request.Request, *args: Any, **kwargs: Any) -> Any:
        opened.append(req.full_url)
        raise OSError("not reached in a passing test")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    info = record.node_info({names.ENV_NODE_NAME: "n1", record.ENV_IMDS: endpoint})
    assert opened == []
    assert info["source"] is None and info["instanceType"] is None
