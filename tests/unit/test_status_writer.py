"""The status writer: one merge patch per change, the engine's own condition kept,
progress-only changes throttled, and keys a planner drops removed, not left behind."""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.engine.status import StatusWriter
from nightshift.kube import with_removals
from nightshift.pipelinerun.reconcile import LoopState
from tests.unit.test_chart_kubecalls import RecordingKube


def test_status_writes_keep_the_engines_condition() -> None:
    class Recording:
        def __init__(self) -> None:
            self.patched: list[dict[str, Any]] = []

        def patch_status(self, *_a: Any, resource_version: str | None = None,
                         **_k: Any) -> None:
            self.patched.append(_a[4])

    failing = {"type": "ReconcileError", "status": "True", "reason": "ReconcileFailing",
               "message": "boom"}
    obj = {"metadata": {"name": "a", "namespace": "ns"},
           "status": {"phase": "Running", "conditions": [failing]}}
    kube = Recording()
    writer = StatusWriter("example.io/v1", "Example")
    # A planner's status without the engine's condition: the condition stays, so the
    # engine can flip it to False once passes succeed again.
    assert writer.write(kube, obj, {"phase": "Succeeded", "conditions": []})  # type: ignore[arg-type]
    assert kube.patched[-1]["conditions"] == [failing]
    assert not writer.write(kube, obj, {"phase": "Running", "conditions": []})  # type: ignore[arg-type]


def test_pipelinerun_progress_is_throttled_including_succeeded_ranges() -> None:
    class Recording:
        def __init__(self) -> None:
            self.patched = 0

        def patch_status(self, *_a: Any, **_k: Any) -> None:
            self.patched += 1

    now = [100.0]
    state = LoopState()
    state.writer.progress_interval = 10.0
    state.writer.clock = lambda: now[0]
    kube = Recording()

    def obj(done: int) -> dict[str, Any]:
        return {"metadata": {"name": "r", "namespace": "ns"}, "status": {
            "phase": "Running", "succeeded": done, "progress": f"{done}/100",
            "stages": [{"name": "a", "succeeded": done, "running": 10,
                        "succeededItems": f"0-{done - 1}"}]}}

    assert state.writer.write(kube, obj(1), obj(5)["status"])  # type: ignore[arg-type]
    now[0] += 1
    # Only counters and the succeeded ranges moved, one second later: not written.
    assert not state.writer.write(kube, obj(5), obj(9)["status"])  # type: ignore[arg-type]
    now[0] += 10
    assert state.writer.write(kube, obj(5), obj(20)["status"])  # type: ignore[arg-type]
    failed = obj(20)["status"] | {"phase": "Failed"}
    now[0] += 1
    assert state.writer.write(kube, obj(20), failed)  # type: ignore[arg-type]
    assert kube.patched == 3


def test_a_merge_patch_names_what_the_new_status_lacks_as_null() -> None:
    old = {"phase": "Ready", "capacity": "1Gi",
           "squid": {"replicas": 2, "scaling": "not scaling: ...", "hitRatio": 0.5},
           "endpoints": [{"name": "a"}, {"name": "b"}]}
    new = {"phase": "Ready", "squid": {"replicas": 2, "hitRatio": 0.6},
           "endpoints": [{"name": "a"}]}
    assert with_removals(old, new) == {
        "capacity": None, "phase": "Ready",
        "squid": {"scaling": None, "replicas": 2, "hitRatio": 0.6},
        "endpoints": [{"name": "a"}]}  # lists are replaced whole by a merge patch
    # A value that became an object, or an object that became a value: as in `new`.
    assert with_removals({"a": 1, "b": {"c": 1}}, {"a": {"x": 1}, "b": 2}) == {
        "a": {"x": 1}, "b": 2}
    assert with_removals({}, new) == new


def test_a_key_the_planner_drops_leaves_the_stored_status() -> None:
    """Before, the writer sent the new status as a merge patch alone, which keeps what it
    does not name: a squid autoscaler that recovered still said 'not scaling' for ever
    (seen on the real API server too: tests/integration/test_sharedstorage.py)."""
    obj = {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
           "metadata": {"name": "a", "namespace": "ns"},
           "status": {"phase": "Ready", "squid": {"replicas": 1, "scaling": "not scaling"}}}
    kube = RecordingKube([obj])
    path = kube.path(names.API_VERSION, names.PIPELINERUN, "ns", "a")
    stored = kube.store[path]
    new = {"phase": "Ready", "squid": {"replicas": 1}}
    assert StatusWriter(names.API_VERSION, names.PIPELINERUN).write(kube, stored, new)
    assert kube.store[path]["status"] == new
