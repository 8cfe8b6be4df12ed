"""Which watch events wake a run's loop (pipelinerun/handlers.py), and which ask for a
pass now: a stage Job's finish, once, so the next stage and the run's phase do not wait
out the settle interval; every other Job event wakes it as usual, to be coalesced. A
SharedStorage or VirtualCluster wakes the runs that name it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, cast

import pytest

from nightshift.config import OperatorConfig
from nightshift.engine.wakeups import Key
from nightshift.pipelinerun import handlers, reconcile
from nightshift.pipelinerun.reconcile import LoopState
from tests.bad_pipelineruns import stage
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import make_run


class FakeLoops:
    """The run loops' surface the handler uses, with one running loop."""

    def __init__(self) -> None:
        self.state = LoopState()
        self.wakes: list[bool] = []
        self.woken: list[tuple[str, str]] = []

    def key(self, namespace: str, name: str) -> Key:
        return ("PipelineRun", namespace, name)

    def states(self) -> dict[Key, LoopState]:
        return {self.key("ns", "run"): self.state}

    def wake(self, namespace: str, name: str, *, now: bool = False) -> None:
        self.wakes.append(now)
        self.woken.append((namespace, name))


def job(uid: str, *conditions: str, ready: int = 0) -> dict[str, Any]:
    return {
        "meta": {"name": f"run-s-{uid}", "uid": uid,
                 "labels": {"nightshift.io/pipeline-run": "run", "nightshift.io/stage": "s"}},
        "status": {"ready": ready,
                   "conditions": [{"type": c, "status": "True"} for c in conditions]},
        "namespace": "ns",
    }


def event(loops: FakeLoops, type_: str | None, j: dict[str, Any]) -> bool:
    # kopf types the decorated handler as its callback protocol; it is the coroutine.
    handler = cast(Callable[..., Coroutine[Any, Any, None]], handlers.job_event)
    asyncio.run(handler(type=type_, **j))
    return loops.wakes[-1]


@pytest.fixture
def loops(monkeypatch: pytest.MonkeyPatch) -> FakeLoops:
    fake = FakeLoops()
    monkeypatch.setattr(handlers, "LOOPS", fake)
    return fake


def test_progress_wakes_to_be_coalesced(loops: FakeLoops) -> None:
    assert event(loops, "MODIFIED", job("a", ready=10)) is False
    assert event(loops, "MODIFIED", job("a", "Suspended")) is False
    assert [s[3] for s in loops.state.ready_samples] == [10, 0]


@pytest.mark.parametrize("finish", [("SuccessCriteriaMet",), ("SuccessCriteriaMet", "Complete"),
                                    ("Failed",), ("FailureTarget", "Failed")])
def test_a_jobs_finish_asks_for_a_pass_now_once(loops: FakeLoops, finish: tuple[str, ...]) -> None:
    assert event(loops, "MODIFIED", job("a", ready=3)) is False
    assert event(loops, "MODIFIED", job("a", *finish)) is True
    # The interim condition's successor, and any later event of the same Job.
    assert event(loops, "MODIFIED", job("a", *finish, "Complete")) is False
    # Another stage's (or attempt's) Job finishing is its own transition.
    assert event(loops, "MODIFIED", job("b", *finish)) is True


def test_an_interim_failure_target_waits_for_failed(loops: FakeLoops) -> None:
    # The pass counts a failed attempt at Failed (progress.ENDING): a pass now at
    # FailureTarget would see nothing new, and use up the Job's one pass now.
    assert event(loops, "MODIFIED", job("a", "FailureTarget")) is False
    assert event(loops, "MODIFIED", job("a", "FailureTarget", "Failed")) is True


def test_a_restarts_initial_listing_does_not_ask(loops: FakeLoops) -> None:
    assert event(loops, None, job("a", "Complete")) is False
    assert event(loops, "MODIFIED", job("a", "Complete")) is False


def test_a_job_of_a_run_without_a_loop_wakes_as_usual(loops: FakeLoops) -> None:
    j = job("a", "Complete")
    j["meta"]["labels"]["nightshift.io/pipeline-run"] = "other"
    assert event(loops, "MODIFIED", j) is False


def other_event(handler: object, name: str, namespace: str = "ns") -> None:
    fn = cast(Callable[..., Coroutine[Any, Any, None]], handler)
    asyncio.run(fn(type="ADDED", meta={"name": name, "namespace": namespace},
                   namespace=namespace))


def test_a_storage_or_cluster_wakes_only_the_runs_that_name_it(loops: FakeLoops) -> None:
    loops.state.references = frozenset({("SharedStorage", "data"),
                                         ("VirtualCluster", "survey")})
    other_event(handlers.storage_event_for_runs, "data")
    other_event(handlers.virtualcluster_event_for_runs, "survey")
    assert loops.woken == [("ns", "run"), ("ns", "run")]
    assert loops.wakes == [False, False]  # coalesced as usual
    other_event(handlers.storage_event_for_runs, "other")
    other_event(handlers.storage_event_for_runs, "survey")  # a VirtualCluster's name
    other_event(handlers.storage_event_for_runs, "data", namespace="elsewhere")
    other_event(handlers.virtualcluster_event_for_runs, "data")
    assert len(loops.woken) == 2


def test_a_pass_records_what_the_run_names_before_reading_it() -> None:
    run = make_run([stage("a")], virtualCluster="survey",
                   storage=[{"name": "raw", "sharedStorage": "data"}])
    kube = RecordingKube([run])
    state = LoopState()
    reconcile.reconcile(kube, OperatorConfig.from_env(), "physics", "nightly", state)
    # Neither exists: the run waits for them, and their creation wakes it.
    assert state.references == {("SharedStorage", "data"), ("VirtualCluster", "survey")}
