"""CPU profiles beside a bench run (bench/profiles.py) and the probe's clean-up (Beside)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hostspeed import HostSpeed
from jobbench import Beside
from profiles import Profiles, Window, endpoints, note_pods_created


def test_window_parses_and_names_the_flag_when_wrong() -> None:
    assert Window.parse("30:120") == Window(30.0, 120)
    for bad in ("120", "a:b", "-1:10", "5:0"):
        with pytest.raises(ValueError, match="--profile"):
            Window.parse(bad)


def test_endpoints_come_from_the_clusters_state() -> None:
    state = {"ports": {"apiserver": 1, "controller_manager": 2, "scheduler": 3, "kwok": 4}}
    assert endpoints(state) == {
        "kube-apiserver": "https://127.0.0.1:1/debug/pprof/profile",
        "kube-controller-manager": "https://127.0.0.1:2/debug/pprof/profile",
        "kube-scheduler": "https://127.0.0.1:3/debug/pprof/profile",
    }


class _Pprof(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        _Pprof.seen.append((self.path, self.headers.get("Authorization")))
        body = b"profile-bytes"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def pprof_server() -> Iterator[str]:
    _Pprof.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Pprof)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/debug/pprof/profile"
    srv.shutdown()


def test_a_window_is_taken_after_its_delay_and_saved_per_part(
        tmp_path: Path, pprof_server: str) -> None:
    prof = Profiles(window=Window(0.3, 1), urls={"kwok": pprof_server,
                                                 "refuses": "http://127.0.0.1:9/x"},
                    token="t", ca_file="", out_prefix=tmp_path / "prof-x-pair-1of3-bare")
    t0 = time.time()
    prof.start(t0)
    time.sleep(0.6)
    res = prof.finish()
    assert (tmp_path / "prof-x-pair-1of3-bare-kwok.pprof").read_bytes() == b"profile-bytes"
    assert res["kwok"]["from_s"] >= 0.3
    assert _Pprof.seen == [("/debug/pprof/profile?seconds=1", None)]  # no token over HTTP
    assert "127.0.0.1:9" in res["refuses"]["error"]  # recorded, not skipped in silence


def test_a_run_shorter_than_the_delay_takes_no_profile(tmp_path: Path, pprof_server: str) -> None:
    prof = Profiles(window=Window(30, 1), urls={"kwok": pprof_server}, token="t", ca_file="",
                    out_prefix=tmp_path / "p")
    prof.start(time.time())
    assert prof.finish() == {"kwok": {"error": "the run ended before the window began"}}
    assert _Pprof.seen == []


def test_pods_created_are_counted_within_each_window() -> None:
    host: dict[str, Any] = {"profiles": {"kwok": {"from_s": 10.0, "to_s": 20.0},
                                         "x": {"error": "e"}}}
    note_pods_created(host, [1005.0, 1010.0, 1015.0, 1020.0, 1021.0], t0=1000.0)
    assert host["profiles"]["kwok"]["pods_created"] == 3
    assert "pods_created" not in host["profiles"]["x"]


def test_a_run_that_raises_stops_the_probe_and_removes_its_file() -> None:
    speed = HostSpeed()
    with pytest.raises(RuntimeError, match="the run failed"), Beside(speed, None):
        time.sleep(0.3)
        raise RuntimeError("the run failed")
    assert speed.proc is None
    assert not speed.out.exists()
