"""A VirtualCluster's events wake the storages waiting for its first pass, and only those
(sharedstorage/handlers.py); a pass records which one a storage waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, cast

import pytest

from nightshift.engine.wakeups import Key
from nightshift.sharedstorage import handlers
from nightshift.sharedstorage.plan import plan
from nightshift.sharedstorage.reconcile import LoopState
from tests.bad_sharedstorages import FACTS
from tests.unit.test_sharedstorage_plan import observed, storage


class FakeLoops:
    """Two storage loops of namespace ns: one waits for VirtualCluster `survey`."""

    def __init__(self) -> None:
        self.waiting, self.other = LoopState(), LoopState()
        self.waiting.awaiting_virtual_cluster = "survey"
        self.woken: list[tuple[str, str]] = []

    def states(self) -> dict[Key, LoopState]:
        return {("SharedStorage", "ns", "software"): self.waiting,
                ("SharedStorage", "ns", "data"): self.other}

    def wake(self, namespace: str, name: str, *, now: bool = False) -> None:
        self.woken.append((namespace, name))


def vc_event(name: str, namespace: str = "ns") -> None:
    fn = cast(Callable[..., Coroutine[Any, Any, None]],
              handlers.virtualcluster_event_for_storages)
    asyncio.run(fn(type="MODIFIED", meta={"name": name, "namespace": namespace},
                   namespace=namespace))


def test_only_the_storage_waiting_for_it_wakes(monkeypatch: pytest.MonkeyPatch) -> None:
    loops = FakeLoops()
    monkeypatch.setattr(handlers, "LOOPS", loops)
    vc_event("survey")
    assert loops.woken == [("ns", "software")]
    vc_event("other")
    vc_event("survey", namespace="elsewhere")
    assert loops.woken == [("ns", "software")]


def test_the_plan_names_the_virtual_cluster_it_waits_for() -> None:
    obj = storage("nfs-dedicated")
    waiting = plan(replace(observed(obj), facts=replace(FACTS, virtual_cluster_modes={})))
    assert waiting.awaiting_virtual_cluster == "snfactory"
    ready = plan(replace(observed(obj), facts=replace(
        FACTS, virtual_cluster_modes={"snfactory": "static"})))
    assert ready.awaiting_virtual_cluster is None
