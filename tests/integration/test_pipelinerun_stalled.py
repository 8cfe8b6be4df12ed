"""A stage whose pods no node takes is not a silent "Running": the real scheduler's words
reach the stage and the run (pipelinerun/stalled.py), and go once the pods are gone."""

from __future__ import annotations

from typing import Any

from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import get_run, pipelinerun, stage, stage_status, wait_phase


def _progressing(run: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in (run.get("status") or {}).get("conditions") or []
                if c["type"] == "Progressing")


def test_pods_no_node_fits_are_named_on_the_stage_and_run(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    # The pool's one node has 64 CPUs: a 1000-CPU pod is Unschedulable.
    kubectl.apply(pipelinerun("too-big", namespace, [
        stage("calib", pool, 2, resources={"requests": {"cpu": "1000"}})]))

    def said() -> dict[str, Any] | None:
        run = get_run(kube, namespace, "too-big")
        waits = run.get("status") and _progressing(run).get("reason") == "WaitingForNodes"
        return run if waits else None

    run = wait_for("Progressing WaitingForNodes on the run", said, timeout=120,
                   explain=lambda: str(get_run(kube, namespace, "too-big").get("status")))
    prog = _progressing(run)
    assert prog["status"] == "True", prog  # nodes may still come: still progressing
    assert run["status"]["phase"] == "Running"
    waiting = stage_status(run, "calib")["waiting"]
    assert waiting == prog["message"]
    assert waiting.startswith("stage calib: its pods do not start: pod too-big-"), waiting
    assert "is not scheduled: 0/" in waiting and "Insufficient cpu" in waiting, waiting
    assert "check spec.stages[0].resources" in waiting, waiting
    events = kubectl("get", "events", "-n", namespace, "--field-selector",
                     "involvedObject.name=too-big,reason=StagePodsWaiting",
                     "-o", "jsonpath={.items[*].message}").stdout
    assert "Insufficient cpu" in events, events
    # Cancelled, its pods gone: the stage no longer says it waits.
    kubectl("-n", namespace, "patch", "pipelinerun", "too-big", "--type=merge", "-p",
            '{"spec": {"cancel": true}}')
    run = wait_phase(kube, namespace, "too-big", {"Cancelled"}, 60)
    assert "waiting" not in stage_status(run, "calib"), run["status"]
