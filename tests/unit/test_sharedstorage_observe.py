"""The squids' figures: read from each ready squid's cache manager (the page squid 5.7
prints), the 60-minute page while the 5-minute window is still empty, within one 2 s
budget for all squids, remembered for a while, and left out when a squid fails."""

from __future__ import annotations

from typing import Any

from nightshift.sharedstorage.observe import SquidSampler, refers_to
from nightshift.sharedstorage.status import SquidSample, parse_squid_5min, sample_seconds

# As squid 5.7 prints them (first lines), a squid younger than 5 minutes and its 60min.
YOUNG_5MIN = """sample_start_time = 1795452727.133117 (Mon, 23 Nov 2026 16:52:07 GMT)
sample_end_time = 1795452727.133117 (Mon, 23 Nov 2026 16:52:07 GMT)
client_http.requests = 0.000000/sec
client_http.hits = 0.000000/sec
client_http.errors = 0.000000/sec
"""
YOUNG_60MIN = """sample_start_time = 1795452727.133117 (Mon, 23 Nov 2026 16:52:07 GMT)
sample_end_time = 1795452847.136604 (Mon, 23 Nov 2026 16:54:07 GMT)
client_http.requests = 0.283325/sec
client_http.hits = 0.208327/sec
client_http.errors = 0.000000/sec
"""


def pod(ip: str, ready: bool = True) -> dict[str, Any]:
    return {"status": {"podIP": ip, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


class Fake:
    def __init__(self, pages: dict[str, str], cost: float = 0.0) -> None:
        self.pages = pages
        self.calls: list[tuple[str, float]] = []
        self.now = 0.0
        self.cost = cost

    def clock(self) -> float:
        return self.now

    def fetch(self, url: str, timeout: float) -> str:
        self.calls.append((url, timeout))
        self.now += self.cost
        if url not in self.pages:
            raise OSError(f"connection refused: {url}")
        return self.pages[url]


def test_the_window_and_rates_of_real_pages() -> None:
    assert sample_seconds(YOUNG_5MIN) == 0.0
    assert round(sample_seconds(YOUNG_60MIN)) == 120
    assert parse_squid_5min(YOUNG_60MIN) == SquidSample(0.283325, 0.208327)


def test_young_squid_read_from_its_60_minute_page() -> None:
    f = Fake({"http://10.0.0.1:3128/squid-internal-mgr/5min": YOUNG_5MIN,
              "http://10.0.0.1:3128/squid-internal-mgr/60min": YOUNG_60MIN})
    s = SquidSampler(fetch=f.fetch, clock=f.clock)
    assert s.samples("ns", "sw", [pod("10.0.0.1")]) == [SquidSample(0.283325, 0.208327)]
    assert [u.rsplit("/", 1)[1] for u, _ in f.calls] == ["5min", "60min"]


def test_unready_failing_and_late_squids_are_left_out() -> None:
    page = YOUNG_60MIN.replace("16:52:07", "16:49:07").replace("1795452727", "1795452547")
    f = Fake({f"http://10.0.0.{i}:3128/squid-internal-mgr/5min": page for i in range(1, 5)},
             cost=0.8)
    s = SquidSampler(fetch=f.fetch, clock=f.clock)
    pods = [pod("10.0.0.9"), pod("10.0.0.1", ready=False), pod("10.0.0.2"), pod("10.0.0.3"),
            pod("10.0.0.4")]
    out = s.samples("ns", "sw", pods)
    # 10.0.0.9 refused (0.8 s), 10.0.0.1 not ready (no request), 10.0.0.2 answered
    # (1.6 s), 10.0.0.3 answered at 2.4 s (asked with 0.4 s left), 10.0.0.4 past the budget.
    assert len(out) == 2
    assert [u.split("/")[2] for u, _ in f.calls] == ["10.0.0.9:3128", "10.0.0.2:3128",
                                                     "10.0.0.3:3128"]
    assert all(t <= 2.0 for _, t in f.calls) and round(f.calls[-1][1], 1) == 0.4


def test_samples_are_remembered_for_the_ttl() -> None:
    f = Fake({"http://10.0.0.1:3128/squid-internal-mgr/5min": YOUNG_60MIN})
    s = SquidSampler(fetch=f.fetch, clock=f.clock, ttl=30)
    first = s.samples("ns", "sw", [pod("10.0.0.1")])
    f.now += 10
    assert s.samples("ns", "sw", [pod("10.0.0.1")]) == first and len(f.calls) == 1
    f.now += 25
    s.samples("ns", "sw", [pod("10.0.0.1")])
    assert len(f.calls) == 2
    s.forget("ns", "sw")
    s.samples("ns", "sw", [pod("10.0.0.1")])
    assert len(f.calls) == 3


def test_runs_refer_to_storages_by_name() -> None:
    run = {"spec": {"storage": [{"name": "a", "s3": {"bucket": "b"}},
                                {"name": "sw", "sharedStorage": "software"}]}}
    assert refers_to(run, "software") and not refers_to(run, "sw")
    assert not refers_to({"spec": {}}, "software")
