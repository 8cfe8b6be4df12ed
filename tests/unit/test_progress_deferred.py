"""A progress write the status writer holds back is never left to the resync: the pass
that held it asks to run again when it is due. Without that, a stage whose last items
finish inside the interval, or a paused stage, showed old counts for a minute (found as
a flaky integration test: test_pipelinerun_final's lost Job waits for the record and
the Job to agree)."""

from __future__ import annotations

import pytest

from nightshift.api.requeue import sooner
from nightshift.config import OperatorConfig
from nightshift.pipelinerun import reconcile as pipelinerun
from tests.bad_pipelineruns import stage
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import make_run

INTERVAL = 10.0


def test_sooner_keeps_the_earlier_delay_and_none_means_resync() -> None:
    assert sooner(None, None) is None
    assert sooner(5.0, None) == 5.0
    assert sooner(None, 3.0) == 3.0
    assert sooner(5.0, 3.0) == 3.0


def _setup(monkeypatch: pytest.MonkeyPatch) -> tuple[RecordingKube, pipelinerun.LoopState,
                                                     list[float], str]:
    clock = [1000.0]
    monkeypatch.setattr("nightshift.pipelinerun.observe.time.monotonic", lambda: clock[0])
    kube = RecordingKube([make_run([stage("calib", forEach={"items": list("abcdef")})])])
    state = pipelinerun.LoopState()
    state.writer.clock = lambda: clock[0]
    pipelinerun.reconcile(kube, _config(), "physics", "nightly", state)
    (jpath,) = [p for p in kube.store if "/jobs/" in p]
    return kube, state, clock, jpath


def _config() -> OperatorConfig:
    return OperatorConfig(runner_image="runner:dev", progress_interval=INTERVAL)


def _done(kube: RecordingKube, jpath: str, indexes: str, succeeded: int) -> None:
    job = kube.store[jpath]
    job["status"] = {"active": 6 - succeeded, "ready": 6 - succeeded,
                     "succeeded": succeeded, "completedIndexes": indexes}
    kube.put(job)


def _succeeded(kube: RecordingKube) -> int:
    (run,) = [o for o in kube.store.values() if o["kind"] == "PipelineRun"]
    return int(run["status"].get("succeeded", 0))


def test_a_held_back_progress_write_asks_for_a_pass_when_it_is_due(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube, state, clock, jpath = _setup(monkeypatch)
    _done(kube, jpath, "0", 1)
    clock[0] += INTERVAL + 1
    pipelinerun.reconcile(kube, _config(), "physics", "nightly", state)
    assert _succeeded(kube) == 1
    # Three seconds later two more items are done: only counters moved, so the write
    # waits for the interval, and the pass asks to come back when it ends.
    _done(kube, jpath, "0-2", 3)
    clock[0] += 3
    out = pipelinerun.reconcile(kube, _config(), "physics", "nightly", state)
    assert _succeeded(kube) == 1
    assert out.requeue_after == pytest.approx(INTERVAL - 3)
    # That pass, with no event in between, writes what was held back.
    clock[0] += INTERVAL - 3
    out = pipelinerun.reconcile(kube, _config(), "physics", "nightly", state)
    assert _succeeded(kube) == 3
    assert out.requeue_after is None or out.requeue_after > INTERVAL - 3


def test_nothing_held_back_leaves_the_plans_own_requeue(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube, state, clock, jpath = _setup(monkeypatch)
    _done(kube, jpath, "0", 1)
    clock[0] += INTERVAL + 1
    out = pipelinerun.reconcile(kube, _config(), "physics", "nightly", state)
    assert _succeeded(kube) == 1
    assert state.writer.deferred is None
    again = pipelinerun.reconcile(kube, _config(), "physics", "nightly", state)
    assert state.writer.deferred is None
    assert again.requeue_after == out.requeue_after
