"""The test bed's cluster DNS (nightshift_localcluster/dns.py) reads a Service from the
API server once per burst of lookups. A pod's resolver asks A and AAAA for each name of
its search list, so 16 client threads resolving one Service at once were dozens of
concurrent GETs, each on its own TLS connection; on a loaded bed the answers came after
the resolver had given up (`Temporary failure in name resolution` in
test_sharedstorage_real's squid test)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nightshift_localcluster import dns

SERVICE = {"spec": {"clusterIP": "10.96.0.7"}}


class SlowApi(dns.Api):
    """The resolver's API client with a slow fake read in place of the HTTPS GET."""

    def __init__(self) -> None:  # no kubeconfig: only the cache's state
        self.cache = {}
        self.lock = threading.Lock()
        self.in_flight = {}
        self.reads: list[str] = []

    def fetch(self, path: str) -> Any:
        self.reads.append(path)
        time.sleep(0.2)
        return SERVICE if path.endswith("/sw") else None


def test_a_burst_of_lookups_of_one_service_reads_it_once() -> None:
    api = SlowApi()
    path = "/api/v1/namespaces/ns/services/sw"
    with ThreadPoolExecutor(16) as ex:
        got = list(ex.map(lambda _: api.get(path), range(32)))
    assert got == [SERVICE] * 32
    assert api.reads == [path]


def test_different_services_are_read_apart_and_absent_ones_are_cached_too() -> None:
    api = SlowApi()
    a, b = "/api/v1/namespaces/ns/services/sw", "/api/v1/namespaces/ns/services/none"
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(api.get, [a, b] * 8))
    assert got == [SERVICE, None] * 8
    assert sorted(api.reads) == sorted([a, b])


def test_an_answer_older_than_a_second_is_read_again() -> None:
    api = SlowApi()
    path = "/api/v1/namespaces/ns/services/sw"
    api.get(path)
    api.cache[path] = (time.monotonic() - 1.5, SERVICE)
    api.get(path)
    assert api.reads == [path, path]


def test_a_query_for_the_service_answers_its_cluster_ip() -> None:
    resolver = dns.Resolver(SlowApi(), "cluster.local", [])
    assert dns.resolve(resolver.api, ["sw", "ns", "svc", "cluster", "local"],
                       resolver.domain) == (dns.NOERROR, ["10.96.0.7"])
    assert dns.resolve(resolver.api, ["none", "ns", "svc", "cluster", "local"],
                       resolver.domain) == (dns.NXDOMAIN, [])
