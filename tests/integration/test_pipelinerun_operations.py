"""Operating a PipelineRun: suspend, cancel, parallelism, staggered launch, rerun."""

from __future__ import annotations

import json
from typing import Any

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import (
    get_run,
    jobs,
    pipelinerun,
    stage,
    stage_status,
    wait_phase,
)


def _patch(kubectl: Kubectl, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kubectl("patch", "nsrun", name, "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": spec}))


def _job(kube: Kube, namespace: str, run: str) -> dict[str, Any]:
    found = wait_for(f"the Job of {run}", lambda: jobs(kube, namespace, run), 60)
    return dict(found[0])


def _duration(seconds: int) -> dict[str, str]:
    return {"pod-complete.stage.kwok.x-k8s.io/delay": f"{seconds}s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": f"{seconds}s"}


def test_suspend_then_resume(kube: Kube, kubectl: Kubectl, operator: OperatorProcess,
                             namespace: str, pool: str) -> None:
    kubectl.apply(pipelinerun("held", namespace, [stage("a", pool, 3)], suspend=True))
    wait_phase(kube, namespace, "held", {"Suspended"}, 60)
    # Suspended before it started: no Job yet, or only a suspended one, and no pods.
    assert all(j["spec"]["suspend"] for j in jobs(kube, namespace, "held"))
    assert not kube.list("v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=held")
    _patch(kubectl, namespace, "held", {"suspend": False})
    run = wait_phase(kube, namespace, "held", {"Succeeded"}, 90)
    assert stage_status(run, "a")["succeeded"] == 3


def test_cancel_stops_the_pods_and_keeps_the_record(kube: Kube, kubectl: Kubectl,
                                                    operator: OperatorProcess,
                                                    namespace: str, pool: str) -> None:
    kubectl.apply(pipelinerun("stop", namespace,
                              [stage("a", pool, 4, podAnnotations=_duration(60))]))
    wait_for("pods running", lambda: kube.list(
        "v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=stop",
        field_selector="status.phase=Running"), 60)
    _patch(kubectl, namespace, "stop", {"cancel": True})
    run = wait_phase(kube, namespace, "stop", {"Cancelled"}, 60)
    assert _job(kube, namespace, "stop")["spec"]["suspend"] is True
    wait_for("the Job's pods to be gone", lambda: not kube.list(
        "v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=stop",
        field_selector="status.phase=Running"), 60)
    assert stage_status(run, "a")["total"] == 4


def test_parallelism_is_mutable(kube: Kube, kubectl: Kubectl, operator: OperatorProcess,
                                namespace: str, pool: str) -> None:
    kubectl.apply(pipelinerun("knob", namespace,
                              [stage("a", pool, 8, podAnnotations=_duration(30))],
                              parallelism={"a": 2}))
    assert _job(kube, namespace, "knob")["spec"]["parallelism"] == 2
    _patch(kubectl, namespace, "knob", {"parallelism": {"a": 6}})
    wait_for("the Job's parallelism to follow the run",
             lambda: _job(kube, namespace, "knob")["spec"]["parallelism"] == 6, 30)
    _patch(kubectl, namespace, "knob", {"cancel": True})


def test_staggered_launch_raises_parallelism_in_waves(kube: Kube, kubectl: Kubectl,
                                                      operator: OperatorProcess,
                                                      namespace: str, pool: str) -> None:
    kubectl.apply(pipelinerun("waves", namespace,
                              [stage("a", pool, 40, podAnnotations=_duration(60))],
                              launch={"maxPodsPerMinute": 60}))
    first = _job(kube, namespace, "waves")["spec"]["parallelism"]
    assert first == 10, "60 pods a minute start as waves of 10 every 10 s"
    wait_for("the second wave", lambda: _job(kube, namespace, "waves")["spec"][
        "parallelism"] == 20, 30)
    _patch(kubectl, namespace, "waves", {"cancel": True})


def test_rerun_only_the_failed_items(kube: Kube, kubectl: Kubectl,
                                     operator: OperatorProcess, namespace: str,
                                     pool: str) -> None:
    # Completion index 2 fails in the first Job; a rerun Job's index 0 maps to item 2
    # and succeeds (the KWOK stage keys on the completion index).
    failing = {"nightshift.io/kwok-exit-codes": "true",
               "pod-complete.stage.kwok.x-k8s.io/weight": "0",
               "nightshift.io/kwok-exit-code-2": "1"}
    kubectl.apply(pipelinerun("again", namespace, [
        stage("a", pool, 5, retries={"perItem": 0}, podAnnotations=failing),
        stage("b", pool, 1, dependsOn=["a"]),
    ]))
    run = wait_phase(kube, namespace, "again", {"Failed"}, 90)
    assert stage_status(run, "a")["failedItems"] == "2"
    _patch(kubectl, namespace, "again", {"rerunFailed": 1})
    run = wait_phase(kube, namespace, "again", {"Succeeded"}, 120)
    a = stage_status(run, "a")
    assert (a["succeeded"], a["failed"], a["total"]) == (5, 0, 5), a
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for j in jobs(kube, namespace, "again"):
        by_stage.setdefault(j["metadata"]["labels"][names.LABEL_STAGE], []).append(j)
    retry = [j for j in by_stage["a"] if j["spec"]["completions"] == 1]
    assert len(by_stage["a"]) == 2 and len(retry) == 1, "exactly one retry Job, one item"
    assert len(by_stage["b"]) == 1, "the dependent stage ran once, after the rerun"
    # The first attempt's record is kept.
    assert len(a.get("attempts", [])) == 2, a
    assert get_run(kube, namespace, "again")["status"]["rerunFailed"] == 1


def test_a_failed_stage_fails_the_run_once_the_branch_beside_it_ends(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    # a fails at once; b, beside it, runs 20 s more: the run is Running (Failing)
    # meanwhile, then Failed; c, which needs both, never starts. Also: the API server
    # serves our group, and discovery tells one it does not (the plugin's not-found).
    assert kube.serves(names.API_VERSION) and not kube.serves("nope.example.io/v1")
    failing = {"nightshift.io/kwok-exit-codes": "true",
               "pod-complete.stage.kwok.x-k8s.io/weight": "0",
               "nightshift.io/kwok-exit-code-0": "1"}
    slow = {"pod-complete.stage.kwok.x-k8s.io/delay": "20s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "20s"}
    kubectl.apply(pipelinerun("branches", namespace, [
        stage("a", pool, 1, retries={"perItem": 0}, podAnnotations=failing),
        stage("b", pool, 2, podAnnotations=slow),
        stage("c", pool, 1, dependsOn=["a", "b"]),
    ]))

    def failing_said() -> dict[str, Any] | None:
        run = get_run(kube, namespace, "branches")
        prog: dict[str, Any] = next((c for c in (run.get("status") or {}).get(
            "conditions") or [] if c["type"] == "Progressing"), {})
        return run if prog.get("reason") == "Failing" else None

    run = wait_for("the run Failing while b runs", failing_said, 60)
    assert run["status"]["phase"] == "Running" and "completionTime" not in run["status"]
    assert stage_status(run, "b")["phase"] == "Running"
    run = wait_phase(kube, namespace, "branches", {"Failed"}, 120)
    assert stage_status(run, "b")["phase"] == "Succeeded"
    assert stage_status(run, "c")["phase"] == "Pending"
    assert {j["metadata"]["labels"][names.LABEL_STAGE]
            for j in jobs(kube, namespace, "branches")} == {"a", "b"}
