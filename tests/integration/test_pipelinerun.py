"""PipelineRuns on the local cluster: barriers, failures, disruptions, restarts."""

from __future__ import annotations

import random
import time
from typing import Any

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.pipelinerun import items as it
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

# The restart-storm test's kills: enough to land in every part of a three-stage run,
# few enough that the test is about a minute, not the four it took when kills also hit
# the operator's start-up (a kill there tests only that Python can start again).
MAX_KILLS = 12


def _ts(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["creationTimestamp"])


def test_three_stages_with_a_barrier(kube: Kube, kubectl: Kubectl, operator: OperatorProcess,
                                     namespace: str, pool: str) -> None:
    kubectl.apply(pipelinerun("split-invert", namespace, [
        stage("split", pool, 6),
        stage("invert", pool, 4, dependsOn=["split"]),
        stage("concat", pool, 1, dependsOn=["invert"], forEach={"items": ["all"]}),
    ]))
    run = wait_phase(kube, namespace, "split-invert", {"Succeeded", "Failed"}, 150)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    by_stage = {j["metadata"]["labels"][names.LABEL_STAGE]: j
                for j in jobs(kube, namespace, "split-invert")}
    assert sorted(by_stage) == ["concat", "invert", "split"]
    assert [by_stage[s]["spec"]["completions"] for s in ("split", "invert", "concat")] == \
        [6, 4, 1]
    # The barrier: a stage's Job exists only after the stage it depends on completed.
    split_done = stage_status(run, "split")["completionTime"]
    invert_done = stage_status(run, "invert")["completionTime"]
    assert _ts(by_stage["invert"]) >= split_done
    assert _ts(by_stage["concat"]) >= invert_done
    for s, n in (("split", 6), ("invert", 4), ("concat", 1)):
        st = stage_status(run, s)
        assert (st["succeeded"], st["failed"], st["total"]) == (n, 0, n)
    assert run["status"]["progress"] == "11/11"
    events = kubectl("get", "events", "-n", namespace,
                     "--field-selector", "involvedObject.name=split-invert",
                     "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert events, "no events on the run"
    assert len(events) == len(set(events)) or len(events) <= 10, events


def _failing(codes: dict[int, int]) -> dict[str, str]:
    ann = {"nightshift.io/kwok-exit-codes": "true",
           "pod-complete.stage.kwok.x-k8s.io/weight": "0",
           "nightshift.io/kwok-delay": "500ms"}
    ann.update({f"nightshift.io/kwok-exit-code-{i}": str(c) for i, c in codes.items()})
    return ann


def test_failed_items_are_retried_then_reported(kube: Kube, kubectl: Kubectl,
                                                operator: OperatorProcess, namespace: str,
                                                pool: str) -> None:
    kubectl.apply(pipelinerun("flaky", namespace, [
        # Index 1 fails with a retryable code, index 3 with a permanent one.
        stage("reduce", pool, 5, retries={"perItem": 2, "permanentExitCodes": [42]},
              podAnnotations=_failing({1: 3, 3: 42})),
        stage("after", pool, 1, dependsOn=["reduce"]),
    ]))
    run = wait_phase(kube, namespace, "flaky", {"Succeeded", "Failed"}, 150)
    assert run["status"]["phase"] == "Failed", run["status"]
    st = stage_status(run, "reduce")
    assert st["failed"] == 2 and st["succeeded"] == 3, st
    assert st["failedItems"] == "1,3", st
    job = next(j for j in jobs(kube, namespace, "flaky")
               if j["metadata"]["labels"][names.LABEL_STAGE] == "reduce")
    # Retryable: 1 + perItem attempts; permanent (FailIndex): one attempt only.
    pods = kube.list("v1", "Pod", namespace,
                     label_selector=it.job_pods_selector(job))
    per_index: dict[str, int] = {}
    for p in pods:
        idx = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        per_index[idx] = per_index.get(idx, 0) + 1
    assert per_index["1"] == 3, per_index
    assert per_index["3"] == 1, per_index
    # Why: the failure samples name exit codes; the condition names the items.
    codes = {s.get("exitCode") for s in st.get("failureSamples", [])}
    assert codes & {3, 42}, st
    failed = next(c for c in run["status"]["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and "reduce" in failed["message"], failed
    # The dependent stage never started.
    assert all(j["metadata"]["labels"][names.LABEL_STAGE] != "after"
               for j in jobs(kube, namespace, "flaky"))


def test_disruptions_do_not_use_retries(kube: Kube, kubectl: Kubectl,
                                        operator: OperatorProcess, namespace: str,
                                        pool: str) -> None:
    # KWOK picks a duration between delay and jitter-delay: equal means exactly 20 s.
    slow = {"pod-complete.stage.kwok.x-k8s.io/delay": "20s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "20s"}
    kubectl.apply(pipelinerun("spot", namespace, [
        stage("work", pool, 3, retries={"perItem": 0}, podAnnotations=slow),
    ]))

    def running_pods() -> list[dict[str, Any]]:
        pods = kube.list("v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=spot",
                         field_selector="status.phase=Running")
        return pods if len(pods) == 3 else []

    victims = wait_for("3 running pods", running_pods, 60)
    victim = victims[0]["metadata"]["name"]
    # The Eviction API adds the DisruptionTarget condition, as a spot interruption's
    # drain does; podFailurePolicy's Ignore rule must keep the retry budget (0) intact.
    kubectl("create", "--raw",
            f"/api/v1/namespaces/{namespace}/pods/{victim}/eviction", "-f", "-",
            input_='{"apiVersion":"policy/v1","kind":"Eviction","metadata":'
                   f'{{"name":"{victim}","namespace":"{namespace}"}}}}')
    wait_for("the evicted pod to be gone", lambda: kube.get(
        "v1", "Pod", victim, namespace) is None, 60)
    run = wait_phase(kube, namespace, "spot", {"Succeeded", "Failed"}, 120)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert stage_status(run, "work")["succeeded"] == 3
    # The replacement ran under a new name; the Job counted no failure.
    pods = kube.list("v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=spot")
    assert victim not in {p["metadata"]["name"] for p in pods}
    job = jobs(kube, namespace, "spot")[0]
    assert not (job.get("status") or {}).get("failed"), job["status"]


def test_operator_killed_mid_run_finishes_without_duplicates(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    slowish = {"pod-complete.stage.kwok.x-k8s.io/delay": "2s",
               "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "4s"}
    kubectl.apply(pipelinerun("restart", namespace, [
        stage("a", pool, 30, podAnnotations=slowish),
        stage("b", pool, 10, dependsOn=["a"], podAnnotations=slowish),
    ], parallelism={"a": 10}))
    wait_for("stage a to make progress", lambda: (
        (get_run(kube, namespace, "restart").get("status") or {}).get("succeeded", 0) > 0),
        90)
    operator.kill()
    try:
        # While the operator is down the Job keeps running; nothing else creates Jobs.
        wait_for("stage a's Job to progress with the operator down", lambda: any(
            (j.get("status") or {}).get("succeeded", 0) >= 12
            for j in jobs(kube, namespace, "restart")), 60)
    finally:
        operator.start()
    run = wait_phase(kube, namespace, "restart", {"Succeeded", "Failed"}, 150)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    all_jobs = jobs(kube, namespace, "restart")
    assert len(all_jobs) == 2, [j["metadata"]["name"] for j in all_jobs]
    for j in all_jobs:
        n = j["spec"]["completions"]
        assert j["status"]["succeeded"] == n
        assert j["status"]["completedIndexes"] == f"0-{n - 1}"
    assert run["status"]["succeeded"] == 40


def test_operator_killed_again_and_again_loses_and_duplicates_nothing(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    """SIGKILL every few seconds through a three-stage run (issue 14's fault suite):
    kills land while Jobs are created, while items freeze and at the barriers. The
    run must end Succeeded with exactly one Job per stage, every index done once, and
    the status's counts exactly the items'."""
    slowish = {"pod-complete.stage.kwok.x-k8s.io/delay": "1s",
               "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "3s"}
    sizes = {"split": 24, "invert": 40, "concat": 6}
    kubectl.apply(pipelinerun("killed", namespace, [
        stage("split", pool, sizes["split"], podAnnotations=slowish),
        stage("invert", pool, sizes["invert"], dependsOn=["split"], podAnnotations=slowish),
        stage("concat", pool, sizes["concat"], dependsOn=["invert"], podAnnotations=slowish),
    ], parallelism={"split": 8, "invert": 10, "concat": 6}))
    rng = random.Random(14)  # noqa: S311  (kill timing, not a secret)
    kills, startups = 0, []
    # Each kill waits until the operator is up again, then lands 0.3-3 s into its work
    # (listing, reconciling, writing), never in its Python start-up, which would test
    # nothing; twelve at most, then the run finishes under a live operator.
    while kills < MAX_KILLS:
        phase = (get_run(kube, namespace, "killed").get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            break
        startups.append(operator.wait_up())
        time.sleep(rng.uniform(0.3, 3.0))
        operator.kill()
        kills += 1
        time.sleep(rng.uniform(0.2, 2.0))
        operator.start()
    run = wait_phase(kube, namespace, "killed", {"Succeeded", "Failed"}, 150)
    assert kills >= 4, f"the run ended after {kills} kills: make it longer"
    assert run["status"]["phase"] == "Succeeded", run["status"]
    all_jobs = jobs(kube, namespace, "killed")
    by_stage = {j["metadata"]["labels"][names.LABEL_STAGE]: j for j in all_jobs}
    assert len(all_jobs) == 3 and set(by_stage) == set(sizes), \
        [j["metadata"]["name"] for j in all_jobs]
    for name, j in by_stage.items():
        n = sizes[name]
        assert j["spec"]["completions"] == n
        assert j["status"]["succeeded"] == n and j["status"].get("failed", 0) == 0
        assert j["status"]["completedIndexes"] == f"0-{n - 1}"
        assert stage_status(run, name)["succeeded"] == n
    assert run["status"]["succeeded"] == sum(sizes.values())
    print(f"operator SIGKILLed {kills} times (each after it was up, which took "
          f"{min(startups):.1f}-{max(startups):.1f} s); 3 Jobs, {sum(sizes.values())} "
          "items, each once")
