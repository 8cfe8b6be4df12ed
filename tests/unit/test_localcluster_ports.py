"""The local cluster's listening ports: below the kernel's ephemeral range, so no
outgoing connection can take one between its pick and its bind, and below the NodePort
range."""

from __future__ import annotations

import secrets
import socket

import pytest

from nightshift_localcluster import procs


def test_ports_come_from_below_the_ephemeral_range_and_are_never_given_twice() -> None:
    low = min(procs.ephemeral_low(), procs.NODE_PORTS)
    if low - procs.PORT_FLOOR < 1000:
        pytest.skip(f"this machine's ephemeral range starts at {low}: no room below it")
    ports = [procs.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(procs.PORT_FLOOR <= p < low for p in ports), ports
    for p in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_someone_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        # A range of one port, the busy one: every pick is refused, so the kernel picks.
        monkeypatch.setattr(procs, "PORT_FLOOR", busy)
        monkeypatch.setattr(procs, "ephemeral_low", lambda: busy + 1000)
        monkeypatch.setattr(procs, "NODE_PORTS", busy + 1000)
        picks: list[int] = []

        def first(n: int) -> int:
            picks.append(n)
            return 0

        monkeypatch.setattr(secrets, "randbelow", first)
        port = procs.free_port()
        assert port != busy
        assert picks == [1000] * 200, "every pick tried the busy port, then the kernel's"
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_no_room_below_the_range_falls_back_to_the_kernels_pick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "ephemeral_low", lambda: procs.PORT_FLOOR + 10)
    port = procs.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert port in procs._given
