"""Operator metrics: runs by phase and items by state, from what passes wrote."""

from __future__ import annotations

from prometheus_client import REGISTRY

from nightshift import metrics
from nightshift.engine.loop import Outcome


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_runs_by_phase_and_items_by_state_follow_the_passes() -> None:
    metrics.observe_run("m1", "a", {"phase": "Running", "stages": [
        {"name": "ifu", "succeeded": 7, "failed": 1, "running": 3}]})
    metrics.observe_run("m1", "b", {"phase": "Running", "stages": []})
    assert value("nightshift_runs", namespace="m1", phase="Running") == 2
    assert value("nightshift_items", namespace="m1", run="a", stage="ifu",
                 state="failed") == 1
    metrics.observe_run("m1", "a", {"phase": "Succeeded", "stages": [
        {"name": "ifu", "succeeded": 11, "failed": 0, "running": 0}]})
    assert value("nightshift_runs", namespace="m1", phase="Running") == 1
    assert value("nightshift_runs", namespace="m1", phase="Succeeded") == 1
    assert value("nightshift_items", namespace="m1", run="a", stage="ifu",
                 state="succeeded") == 11
    metrics.observe_run("m1", "a", None)
    metrics.observe_run("m1", "b", None)
    assert value("nightshift_runs", namespace="m1", phase="Succeeded") is None
    assert value("nightshift_items", namespace="m1", run="a", stage="ifu",
                 state="succeeded") is None


def test_runs_from_many_threads_at_once_are_all_counted() -> None:
    # Passes of different runs write their metrics from worker threads at once: the
    # phase map iterated while another run is added used to raise mid-pass.
    import sys
    import threading

    errors: list[BaseException] = []

    def observe(prefix: str) -> None:
        try:
            for i in range(1500):
                metrics.observe_run("m2", f"{prefix}{i}", {"phase": "Running", "stages": []})
        except BaseException as e:
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=observe, args=(p,)) for p in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert value("nightshift_runs", namespace="m2", phase="Running") == 3000
    for p in "ab":
        for i in range(1500):
            metrics.observe_run("m2", f"{p}{i}", None)
    assert value("nightshift_runs", namespace="m2", phase="Running") is None


def test_a_deleted_run_leaves_the_metrics_when_its_loop_ends() -> None:
    """Deleting a run ends its loop without another pass: the loop's end removes its
    series (else every run ever seen stays counted, and `run` labels pile up)."""
    import asyncio

    from nightshift.pipelinerun import handlers

    def pass_fn(ns: str, name: str, _state: object) -> Outcome:
        metrics.observe_run(ns, name, {"phase": "Running", "stages": [
            {"name": "ifu", "succeeded": 1, "failed": 0, "running": 2}]})
        return Outcome()

    async def main() -> None:
        loops = handlers.LOOPS
        loops.bind(pass_fn, settle=0.01, resync=30)
        run = {"metadata": {"namespace": "m3", "name": "gone"}}
        loops.on_object_event("ADDED", run)
        for _ in range(500):
            if value("nightshift_runs", namespace="m3", phase="Running") == 1:
                break
            await asyncio.sleep(0.01)
        assert value("nightshift_items", namespace="m3", run="gone", stage="ifu",
                     state="running") == 2
        loops.on_object_event("DELETED", run)
        for _ in range(500):
            if value("nightshift_runs", namespace="m3", phase="Running") is None:
                break
            await asyncio.sleep(0.01)
        await loops.shutdown()

    asyncio.run(main())
    assert value("nightshift_runs", namespace="m3", phase="Running") is None
    assert value("nightshift_items", namespace="m3", run="gone", stage="ifu",
                 state="running") is None
