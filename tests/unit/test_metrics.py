"""Operator metrics: runs by phase and items by state, from what passes wrote."""

from __future__ import annotations

from prometheus_client import REGISTRY

from nightshift import metrics


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
