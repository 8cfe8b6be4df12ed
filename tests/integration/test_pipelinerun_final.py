"""Finished is final, and a Job lost mid-run reruns nothing that succeeded (issue 14).

Stage Jobs are deleted by hand here, as a TTL controller or a clean-up of finished
Jobs would: the run's status is the record, the Jobs only the work in flight.
"""

from __future__ import annotations

import json
import time
from typing import Any

from nightshift.api import names, ranges
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


def _patch(kubectl: Kubectl, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kubectl("patch", "nsrun", name, "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": spec}))


def _duration(seconds: int) -> dict[str, str]:
    return {"pod-complete.stage.kwok.x-k8s.io/delay": f"{seconds}s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": f"{seconds}s"}


def _stage(kube: Kube, namespace: str, run: str, name: str) -> dict[str, Any]:
    """The stage's status entry, {} before the first pass wrote one."""
    status = get_run(kube, namespace, run).get("status") or {}
    return next((s for s in status.get("stages") or [] if s["name"] == name), {})


def _job(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get("batch/v1", "Job", name, namespace)


def test_a_succeeded_runs_deleted_job_is_not_created_again(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    kubectl.apply(pipelinerun("done", namespace, [stage("a", pool, 3)]))
    run = wait_phase(kube, namespace, "done", {"Succeeded"}, 90)
    before = run["status"]
    (job,) = jobs(kube, namespace, "done")
    kubectl("delete", "job", job["metadata"]["name"], "-n", namespace, "--wait=true")
    # A spec change the operator must observe: proof that passes ran after the deletion.
    _patch(kubectl, namespace, "done", {"parallelism": {"a": 2}})
    generation = get_run(kube, namespace, "done")["metadata"]["generation"]
    wait_for("a pass after the deletion", lambda: get_run(kube, namespace, "done")[
        "status"].get("observedGeneration") == generation, 60)
    # And a few more seconds of passes (its Job watch and the resync) to act wrongly in.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        assert jobs(kube, namespace, "done") == [], "a finished run created a Job again"
        assert not kube.list("v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=done",
                             field_selector="status.phase!=Succeeded")
        time.sleep(1)
    after = get_run(kube, namespace, "done")["status"]
    assert after["phase"] == "Succeeded"
    assert after["stages"] == before["stages"], "the record survives its Job"
    assert (after["succeeded"], after["total"], after["progress"]) == (3, 3, "3/3")
    assert after["completionTime"] == before["completionTime"]


def test_a_job_lost_mid_run_reruns_only_the_unrecorded_items(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    n = 12
    kubectl.apply(pipelinerun("lost", namespace,
                              [stage("a", pool, n, podAnnotations=_duration(2))],
                              parallelism={"a": 3}))
    first = it.job_name("lost", "a", 0)
    wait_for("some items done", lambda: _stage(kube, namespace, "lost", "a")
             .get("succeeded", 0) >= 4, 90)
    # Pause the stage so the record and the Job agree, then lose the Job mid-run.
    _patch(kubectl, namespace, "lost", {"parallelism": {"a": 0}})

    def settled() -> dict[str, Any] | None:
        job = _job(kube, namespace, first)
        assert job is not None
        st = job.get("status") or {}
        rec = _stage(kube, namespace, "lost", "a")
        pods = kube.list("v1", "Pod", namespace,
                         label_selector=it.job_pods_selector(job),
                         field_selector="status.phase!=Succeeded,status.phase!=Failed")
        if (st.get("active") or pods or not st.get("completedIndexes")
                or rec.get("succeededItems") != st.get("completedIndexes")):
            return None
        return job

    def explain() -> str:
        job = _job(kube, namespace, first) or {}
        return (f"Job status {job.get('status')}; the run's record of stage a "
                f"{_stage(kube, namespace, 'lost', 'a')}")

    job = wait_for("the paused Job and the record to agree", settled, 60, explain=explain)
    done = ranges.parse(job["status"]["completedIndexes"])
    assert 4 <= len(done) < n, done
    kubectl("delete", "job", first, "-n", namespace, "--wait=true")

    repl_name = it.job_name("lost", "a", 1)
    repl = wait_for("the replacement Job", lambda: _job(kube, namespace, repl_name), 60)
    todo = [i for i in range(n) if i not in done]
    assert repl["spec"]["completions"] == len(todo), "only the items not recorded run"
    assert repl["metadata"]["annotations"][names.ANNOTATION_SKIP_ITEMS] == ranges.compress(
        done)
    index_cm = kube.get("v1", "ConfigMap",
                        it.indexes_configmap_name("lost", "a", 1, 0), namespace)
    assert index_cm is not None
    mapped = "".join(index_cm["data"].values()).split()
    assert mapped == [str(i) for i in todo], "completion index -> the unrecorded items"
    _patch(kubectl, namespace, "lost", {"parallelism": {"a": n}})
    run = wait_phase(kube, namespace, "lost", {"Succeeded"}, 120)
    a = stage_status(run, "a")
    assert (a["succeeded"], a["failed"], a["total"]) == (n, 0, n), a
    assert a["succeededItems"] == f"0-{n - 1}"
    assert [x.get("reason") for x in a["attempts"]] == ["JobLost", None]
    repl = _job(kube, namespace, repl_name)
    assert repl is not None
    # Every pod the replacement ran, one per item it was given, none failed or extra.
    assert (repl["status"].get("succeeded"), repl["status"].get("failed", 0)) == (
        len(todo), 0)
    assert {j["metadata"]["name"] for j in jobs(kube, namespace, "lost")} == {repl_name}
    warnings = kubectl("get", "events", "-n", namespace, "-o", "json",
                       "--field-selector", "reason=JobLost").stdout
    assert json.loads(warnings)["items"], "no JobLost event"


def test_a_lost_jobs_orphaned_pods_are_named_until_they_go(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    # The Job deleted with --cascade=orphan: its pods run on, and the replacement waits
    # for them (no item twice); the run says so, with the delete that frees it.
    kubectl.apply(pipelinerun("orphans", namespace,
                              [stage("a", pool, 4, podAnnotations=_duration(600))]))
    first = it.job_name("orphans", "a", 0)
    wait_for("the stage's pods running", lambda: (_job(kube, namespace, first) or {}).get(
        "status", {}).get("ready") == 4, 90)
    wait_for("the Job recorded", lambda: _stage(kube, namespace, "orphans", "a").get(
        "jobName") == first, 30)
    kubectl("delete", "job", first, "-n", namespace, "--cascade=orphan")

    def waiting() -> str | None:
        conds = (kube.get(names.API_VERSION, names.PIPELINERUN, "orphans", namespace)
                 or {}).get("status", {}).get("conditions") or []
        prog: dict[str, Any] = next((c for c in conds if c["type"] == "Progressing"), {})
        return str(prog["message"]) if prog.get("reason") == "WaitingForLostJobPods" else None

    said = wait_for("the orphaned pods named", waiting, 60)
    selector = ("nightshift.io/attempt=0,nightshift.io/pipeline-run=orphans,"
                "nightshift.io/stage=a")
    assert said == (f"stage a: Job {first} is gone but some of its pods are not; its "
                    "replacement waits for them, so that no item runs twice (pods left by "
                    "--cascade=orphan, or on a node that is gone: kubectl delete pods -n "
                    f"{namespace} -l {selector}; one stuck Terminating on a node that no "
                    "longer answers needs --grace-period=0 --force, once the node is known "
                    "to be down)"), said
    assert _job(kube, namespace, it.job_name("orphans", "a", 1)) is None
    kubectl("delete", "pods", "-n", namespace, "-l", selector, "--wait=false")
    wait_for("the replacement Job", lambda: _job(kube, namespace,
                                                 it.job_name("orphans", "a", 1)), 90)
