"""An HTTP proxy that injects S3 faults in front of a real S3-compatible server.

Requests are forwarded unchanged (the Host header too, so SigV4 signatures still hold).
A `Faults` policy, applied by request number, answers some with 503 SlowDown, stalls
some past the client's read timeout, and sends some bodies slowly in small pieces;
`injected` counts what it did, so a test can show the faults really happened.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")


@dataclass
class Faults:
    # Every n-th request (1-based count), 0 = never.
    error_every: int = 0
    stall_every: int = 0
    slow_every: int = 0
    stall_seconds: float = 4.0
    # A slow body: pieces of this size, this far apart.
    slow_piece: int = 16 * 1024
    slow_pause: float = 0.02
    # Only requests of these methods are touched ("" = all).
    methods: tuple[str, ...] = ()
    injected: dict[str, int] = field(default_factory=lambda: {"error": 0, "stall": 0,
                                                              "slow": 0, "passed": 0})
    _n: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, method: str) -> str:
        if self.methods and method not in self.methods:
            return "passed"
        with self._lock:
            self._n += 1
            n = self._n
            for kind, every in (("error", self.error_every), ("stall", self.stall_every),
                                ("slow", self.slow_every)):
                if every and n % every == 0:
                    self.injected[kind] += 1
                    return kind
            self.injected["passed"] += 1
            return "passed"


class FaultProxy:
    def __init__(self, upstream: str, faults: Faults) -> None:
        self.upstream = urlsplit(upstream)
        self.faults = faults
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        kind = self.faults.pick(h.command)
        if kind == "error":
            h.send_response(503)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(SLOWDOWN)))
            h.end_headers()
            h.wfile.write(SLOWDOWN)
            return
        if kind == "stall":
            # Past the client's read timeout: it gives up on this connection and retries.
            time.sleep(self.faults.stall_seconds)
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1",
                                          self.upstream.port, timeout=120)
        try:
            conn.request(h.command, h.path, body=body, headers=dict(h.headers.items()))
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        h.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command == "HEAD":
            return
        if kind == "slow":
            for i in range(0, len(data), self.faults.slow_piece):
                h.wfile.write(data[i:i + self.faults.slow_piece])
                h.wfile.flush()
                time.sleep(self.faults.slow_pause)
        else:
            h.wfile.write(data)
