"""A stage whose pods no node takes, or the API server refuses, is not a silent "Running":
the real scheduler's or Job controller's words reach the stage and the run
(pipelinerun/stalled.py), and go once the pods are gone or made."""

from __future__ import annotations

from typing import Any

from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import (
    get_run,
    pipelinerun,
    stage,
    stage_status,
    wait_phase,
    wait_progressing,
)


def test_pods_no_node_fits_are_named_on_the_stage_and_run(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    # The pool's one node has 64 CPUs: a 1000-CPU pod is Unschedulable.
    kubectl.apply(pipelinerun("too-big", namespace, [
        stage("calib", pool, 2, resources={"requests": {"cpu": "1000"}})]))

    prog = wait_progressing(kube, namespace, "too-big", "WaitingForNodes", timeout=120)
    run = get_run(kube, namespace, "too-big")
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


def test_pods_that_cannot_pull_are_named_while_the_others_run(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    # Index 1 stays in ErrImagePull (our KWOK stage, hack/kwok/pod-image-pull.yaml), as on
    # a node that cannot pull the image; the other three run for 90 s each.
    kubectl.apply(pipelinerun("mixed", namespace, [stage("calib", pool, 4, podAnnotations={
        "nightshift.io/kwok-pull-fail": "1", "pod-create.stage.kwok.x-k8s.io/weight": "0",
        "pod-complete.stage.kwok.x-k8s.io/delay": "90s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "90s"})]))

    prog = wait_progressing(kube, namespace, "mixed", "SomePodsNotStarting", timeout=120)
    run = get_run(kube, namespace, "mixed")
    assert prog["status"] == "True", prog  # the others run: still progressing
    assert run["status"]["phase"] == "Running"
    waiting = stage_status(run, "calib")["waiting"]
    assert waiting == prog["message"]
    assert waiting.startswith("stage calib: some of its pods do not start while others "
                              "run: pod mixed-"), waiting
    assert "container main: ErrImagePull: failed to pull and unpack image" in waiting, waiting
    assert waiting.endswith("check spec.stages[0].image"), waiting
    # Said while the others ran: the stage's Job had pods ready.
    job = next(j for j in kube.list("batch/v1", "Job", namespace))
    assert int(job["status"].get("ready") or 0) >= 1, job["status"]
    kubectl("-n", namespace, "patch", "pipelinerun", "mixed", "--type=merge", "-p",
            '{"spec": {"cancel": true}}')
    run = wait_phase(kube, namespace, "mixed", {"Cancelled"}, 60)
    assert "waiting" not in stage_status(run, "calib"), run["status"]


def test_pods_a_limitrange_refuses_are_named_and_the_run_goes_on_once_mended(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    # The API server refuses every pod: the Job has none, and says why only in its
    # FailedCreate events (the real Job controller's, read by the Job's uid).
    kubectl.apply({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "small"},
                   "spec": {"limits": [{"type": "Container", "max": {"cpu": "500m"}}]}},
                  namespace)
    kubectl.apply(pipelinerun("limited", namespace, [
        stage("calib", pool, 2, resources={"requests": {"cpu": "1"}, "limits": {"cpu": "1"}})]))
    prog = wait_progressing(kube, namespace, "limited", "PodsNotCreated", timeout=150)
    assert prog["status"] == "False", prog  # a LimitRange does not mend itself
    run = get_run(kube, namespace, "limited")
    assert run["status"]["phase"] == "Running"
    waiting = stage_status(run, "calib")["waiting"]
    assert waiting == prog["message"]
    assert waiting.startswith("stage calib: the Job controller cannot create its pods: "
                              "maximum cpu usage per Container is 500m, but limit is 1"
                              ), waiting
    assert waiting.endswith("check spec.stages[0].resources against the namespace's "
                            "LimitRange"), waiting
    # Mended: the Job controller's next retry makes the pods, and the run finishes.
    kubectl("-n", namespace, "delete", "limitrange", "small")
    run = wait_phase(kube, namespace, "limited", {"Succeeded"}, 240)
    assert "waiting" not in stage_status(run, "calib"), run["status"]


def test_a_full_quota_is_named_while_it_holds_the_stage_to_fewer_pods(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    """A quota of one pod: the stage's first pod runs, the second is refused until it
    ends. The run says so, still progressing, and stops saying it at the stage's end."""
    kubectl.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "full"},
                   "spec": {"hard": {"pods": "1"}}}, namespace)

    def counted() -> Any:  # until the quota controller has counted, pods are refused
        stored = kube.get("v1", "ResourceQuota", "full", namespace) or {}
        return (stored.get("status") or {}).get("hard")

    wait_for("the quota counted", counted, timeout=60)
    # The run names the quota STALL_SECONDS (30 s) after it sees the first pod ready
    # and the second missing; the first pod's life bounds the wait, and under a loaded
    # bed its start alone took 10 s and more.
    slow = {"pod-complete.stage.kwok.x-k8s.io/delay": "55s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "55s"}
    kubectl.apply(pipelinerun("quota", namespace, [
        stage("calib", pool, 2, parallelism=2, podAnnotations=slow)]))
    prog = wait_progressing(kube, namespace, "quota", "WaitingForQuota", timeout=54)
    assert prog["status"] == "True", prog  # its own pods ending free it: progressing
    assert prog["message"] == (
        "stage calib: the Job controller cannot create more of its pods: exceeded quota: "
        "full, requested: pods=1, limited: pods=1; pods are created as the namespace's "
        "ResourceQuota frees up; else raise it or lower spec.stages[0].parallelism or "
        "resources"), prog
    run = wait_phase(kube, namespace, "quota", {"Succeeded"}, 150)
    assert "waiting" not in stage_status(run, "calib"), run["status"]
