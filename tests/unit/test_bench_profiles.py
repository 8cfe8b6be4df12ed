"""CPU profiles beside a bench run (bench/profiles.py) and the probe's clean-up (Beside)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hostspeed import HostSpeed
from profiles import (
    Beside,
    Profiles,
    Window,
    cpu_per_write,
    endpoints,
    note_window_work,
    parse_top,
    parts_total,
    print_cpu_per_write,
)


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


def _pod_write(t: float, verb: str, sub: str | None = None) -> dict[str, Any]:
    ref = {"resource": "pods", "namespace": "ns", **({"subresource": sub} if sub else {})}
    return {"verb": verb, "stage": "ResponseComplete", "objectRef": ref,
            "responseStatus": {"code": 201 if verb == "create" else 200},
            "requestReceivedTimestamp": datetime.fromtimestamp(t, UTC).isoformat()}


def test_the_pod_writes_within_each_window_are_counted_by_kind() -> None:
    host: dict[str, Any] = {"profiles": {"api": {"from_s": 10.0, "to_s": 20.0},
                                         "x": {"error": "e"}}}
    entries = [_pod_write(1005.0, "create"), _pod_write(1010.0, "create"),
               _pod_write(1015.0, "create", "binding"), _pod_write(1019.5, "patch", "status"),
               _pod_write(1021.0, "create")]
    note_window_work(host, entries, "ns", t0=1000.0)
    api = host["profiles"]["api"]
    assert api["pod_writes"] == {"create binding": 1, "create pod": 1, "patch status": 1}
    assert api["pods_created"] == 1
    assert api["t0"] == 1000.0
    assert "pod_writes" not in host["profiles"]["x"]


def test_a_run_that_raises_stops_the_probe_and_removes_its_file() -> None:
    speed = HostSpeed()
    with pytest.raises(RuntimeError, match="the run failed"), Beside(speed, None):
        time.sleep(0.3)
        raise RuntimeError("the run failed")
    assert speed.proc is None
    assert not speed.out.exists()


TOP = """File: kube-apiserver
Duration: 10s, Total samples = 7.91s (79.09%)
Showing nodes accounting for 0.02s, 0.25% of 7.91s total
      flat  flat%   sum%        cum   cum%
         0     0%     0%      3.44s 43.49%  k8s.io/apiserver/pkg/storage/cacher.(*C).Update
     0.02s  0.25%  0.25%     950ms 12.01%  sigs.k8s.io/smd/v6/typed.(*TypedValue).Compare
     10ms  0.13%  0.38%     1.50mins 99.00%  runtime.main
"""


def test_pprof_top_text_is_read_in_milliseconds_whatever_its_units() -> None:
    total, cum = parse_top(TOP)
    assert total == pytest.approx(7910.0)
    assert cum["k8s.io/apiserver/pkg/storage/cacher.(*C).Update"] == pytest.approx(3440.0)
    assert cum["sigs.k8s.io/smd/v6/typed.(*TypedValue).Compare"] == 950.0
    assert cum["runtime.main"] == pytest.approx(90_000.0)
    with pytest.raises(ValueError, match="Total samples"):
        parse_top("File: x\n")


def _run(key: str, cpu_api: float, writes: int, chunk: float) -> dict[str, Any]:
    return {"variant": key, "side": key, "cpu_s": {"kube-apiserver": cpu_api, "other": 5.0},
            "pod_work": {"create pod": writes, "conflict": 7}, "host": {"chunk_ms": chunk}}


def test_cpu_per_write_holds_the_host_equal_and_leaves_other_out_of_the_total() -> None:
    runs = [
        # The same work on cores 25 % slower costs 25 % more CPU: the same per chunk-ms.
        _run("bare", 100.0, 1000, 8.0), _run("bare", 80.0, 1000, 6.4),
        # 10 % more CPU for the same writes on the same cores.
        _run("full", 110.0, 1000, 8.0),
    ]
    per = cpu_per_write(runs, key="variant")
    assert per["bare"]["kube-apiserver"] == 12500.0  # 1e6 * 100 / 1000 / 8, conflicts left out
    assert per["full"]["kube-apiserver"] == 13750.0
    assert parts_total(per["bare"]) == 12500.0
    assert cpu_per_write(runs)["bare"] == per["bare"]  # by side, the default key


def test_the_per_write_table_names_the_baseline_the_set_ran(
        capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run("bare", 100.0, 1000, 8.0), _run("run", 110.0, 1000, 8.0)]
    print_cpu_per_write({"items": 10000, "runs": runs, "baseline": "full"})
    out = capsys.readouterr().out
    assert "(full Job against the PipelineRun)" in out
    assert "full / run 0.909" in out
    print_cpu_per_write({"items": 10000, "runs": runs})  # sets before --baseline existed
    assert "bare / run 0.909" in capsys.readouterr().out
