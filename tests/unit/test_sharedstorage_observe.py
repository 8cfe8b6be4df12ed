"""The squids' figures: each ready squid's cache manager counters (the page squid 5.7
prints), rates between two readings (the first from the squid's start), within one 2 s
budget for all squids, remembered for a while, and left out when a squid fails."""

from __future__ import annotations

from typing import Any

from nightshift.sharedstorage.observe import SquidSampler, refers_to
from nightshift.sharedstorage.status import (
    SquidCounters,
    SquidSample,
    parse_squid_counters,
    squid_rates,
)

STARTED = "2026-11-23T16:52:07Z"
T0 = 1795452727.0  # STARTED as epoch seconds


def counters(at: float, requests: int, hits: int) -> str:
    """The first lines of squid 5.7's mgr:counters page."""
    return (f"sample_time = {at:.6f} (Mon, 23 Nov 2026 16:54:07 GMT)\n"
            f"client_http.requests = {requests}\nclient_http.hits = {hits}\n"
            "client_http.errors = 0\nclient_http.kbytes_in = 128\n")


PAGE = counters(T0 + 120, 615, 307)


def pod(ip: str, ready: bool = True, uid: str = "") -> dict[str, Any]:
    return {"metadata": {"uid": uid or f"uid-{ip}"},
            "status": {"podIP": ip, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}],
                "containerStatuses": [{"state": {"running": {"startedAt": STARTED}}}]}}


class Fake:
    def __init__(self, pages: dict[str, str], cost: float = 0.0) -> None:
        self.pages = pages
        self.calls: list[tuple[str, float]] = []
        self.now = 0.0
        self.cost = cost

    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        return T0 + 120 + self.now

    def fetch(self, url: str, timeout: float) -> str:
        self.calls.append((url, timeout))
        self.now += self.cost
        if url not in self.pages:
            raise OSError(f"connection refused: {url}")
        return self.pages[url]


URL = "http://10.0.0.1:3128/squid-internal-mgr/counters"


def test_the_counters_of_a_real_page() -> None:
    assert parse_squid_counters(PAGE, T0 + 120) == SquidCounters(T0 + 120, 615, 307)


def test_rates_between_readings_and_from_the_start() -> None:
    first = SquidCounters(T0 + 100, 500, 200)
    then = SquidCounters(T0 + 150, 1500, 1100)
    assert squid_rates(None, first, T0) == SquidSample(5.0, 2.0)
    assert squid_rates(first, then, T0) == SquidSample(20.0, 18.0)
    # Restarted (the totals went back): from the new start.
    assert squid_rates(then, SquidCounters(T0 + 160, 40, 10), T0 + 150) == \
        SquidSample(4.0, 1.0)
    assert squid_rates(None, first, None) is None


def test_a_squid_read_twice_gives_the_rate_since_the_last_reading() -> None:
    f = Fake({URL: PAGE})
    s = SquidSampler(fetch=f.fetch, clock=f.clock, wall=f.wall, ttl=30)
    assert s.samples("ns", "sw", [pod("10.0.0.1")]) == [SquidSample(615 / 120, 307 / 120)]
    f.pages[URL] = counters(T0 + 180, 1215, 907)
    f.now += 60
    assert s.samples("ns", "sw", [pod("10.0.0.1")]) == [SquidSample(10.0, 10.0)]
    assert [u.rsplit("/", 1)[1] for u, _ in f.calls] == ["counters", "counters"]


def test_unready_failing_and_late_squids_are_left_out() -> None:
    f = Fake({f"http://10.0.0.{i}:3128/squid-internal-mgr/counters": PAGE for i in range(1, 5)},
             cost=0.8)
    s = SquidSampler(fetch=f.fetch, clock=f.clock, wall=f.wall)
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
    f = Fake({URL: PAGE})
    s = SquidSampler(fetch=f.fetch, clock=f.clock, wall=f.wall, ttl=30)
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


class VcKube:
    """Serves one LIST of VirtualClusters, and counts the calls."""

    def __init__(self, vcs: list[dict[str, Any]]) -> None:
        self.vcs, self.calls = vcs, []  # type: ignore[var-annotated]

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             **_: Any) -> list[dict[str, Any]]:
        self.calls.append((kind, namespace))
        return self.vcs if kind == "VirtualCluster" else []


def test_facts_read_the_pools_and_the_mode_of_each_virtual_cluster() -> None:
    from nightshift.sharedstorage.observe import facts
    from nightshift.sharedstorage.spec import SharedStorageSpec
    from tests.bad_sharedstorages import GOOD

    kube = VcKube([
        {"metadata": {"name": "snfactory"}, "spec": {"pools": [{"name": "nfs"}]},
         "status": {"mode": "karpenter"}},
        {"metadata": {"name": "fresh"}, "spec": {"pools": [{"name": "nfs"}]}}])
    spec = SharedStorageSpec.model_validate(GOOD["nfs-dedicated"]["spec"])
    got = facts(kube, "physics", spec, [])  # type: ignore[arg-type]
    assert got.virtual_clusters == {"snfactory": ["nfs"], "fresh": ["nfs"]}
    assert got.virtual_cluster_modes == {"snfactory": "karpenter"}  # "fresh": not yet
    assert kube.calls == [("VirtualCluster", "physics"), ("StorageClass", None)]
    assert got.pool_taints == {"nfs": []}


def test_facts_read_the_taints_of_the_storages_own_virtual_cluster_pools() -> None:
    from nightshift.sharedstorage.observe import facts
    from nightshift.sharedstorage.spec import SharedStorageSpec
    from tests.bad_sharedstorages import GOOD

    taint = {"key": "example.org/dedicated", "value": "nfs", "effect": "NoSchedule"}
    kube = VcKube([
        {"metadata": {"name": "snfactory"}, "spec": {"pools": [
            {"name": "nfs", "taints": [taint]}, {"name": "workers"}]}},
        {"metadata": {"name": "other"}, "spec": {"pools": [
            {"name": "nfs", "taints": [{"key": "not.ours", "effect": "NoSchedule"}]}]}}])
    spec = SharedStorageSpec.model_validate(GOOD["nfs-dedicated"]["spec"])
    got = facts(kube, "physics", spec, [])  # type: ignore[arg-type]
    assert got.pool_taints == {"nfs": [taint], "workers": []}
