"""Items the kubelet evicts again and again for node pressure (pipelinerun/evicted.py).

The pod failure policy ignores DisruptionTarget, which the kubelet also sets on a pod it
evicts because its node ran low on memory or disk: such an item reruns without using a
retry, for ever, and nothing in the Job's status counts it. The run must say so, with
the kubelet's words and the field to change; and the pass reads a running Job's Failed
pods at most every READ_SECONDS, never on every pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nightshift.api import conditions as cond
from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.kube import Obj
from nightshift.pipelinerun import evicted
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import run as manifest
from tests.bad_pipelineruns import stage
from tests.unit.test_chart_kubecalls import RecordingKube

NS = "physics"
MEMORY = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: "
          "61Mi. Container step-0 was using 3512Mi, request is 1Gi, has larger consumption "
          "of memory. ")


def pod(index: int, n: int, *, reason: str = "Evicted", by: str | None = "TerminationByKubelet",
        message: str = MEMORY, labels: dict[str, str] | None = None) -> Obj:
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": by,
                   "message": message}] if by else []
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"nightly-sim-{index}-{n}", "namespace": NS,
                         "labels": labels or {},
                         "annotations": {names.JOB_COMPLETION_INDEX: str(index)}},
            "status": {"phase": "Failed", "reason": reason, "message": message,
                       "conditions": conditions}}


def one_stage(**kw: Any) -> PipelineRunSpec:
    return PipelineRunSpec.model_validate(manifest([stage("sim", **kw)])["spec"])


def test_only_the_kubelets_pressure_evictions_count() -> None:
    assert evicted.kubelet_said(pod(0, 0)) == MEMORY.strip()
    # Past its own ephemeral-storage limit: Evicted without the condition, a failure the
    # policy counts (failure samples say it).
    assert evicted.kubelet_said(pod(0, 0, by=None)) is None
    # A drain or Karpenter's spot interruption: the Eviction API, not pressure.
    assert evicted.kubelet_said(pod(0, 0, reason="", by="EvictionByEvictionAPI")) is None
    assert evicted.kubelet_said(pod(0, 0, reason="Error", by=None)) is None


def test_one_eviction_of_each_item_is_not_said() -> None:
    sp = one_stage()
    assert evicted.summary(sp.stages[0], 0, [pod(i, 0) for i in range(5)]) is None
    assert evicted.summary(sp.stages[0], 0, []) is None


def test_an_item_evicted_twice_for_memory_names_its_requests() -> None:
    sp = one_stage(resources={"requests": {"memory": "1Gi"}})
    found = evicted.summary(sp.stages[0], 0, [pod(3, 0), pod(3, 1), pod(1, 0),
                                              pod(2, 0, by=None)])
    assert found is not None
    reason, text = found
    assert reason == evicted.REASON == "PodsEvicted"
    assert text == (
        "stage sim: item index 3 was evicted 2 times for node pressure (3 evictions in the "
        "stage's pods read) (kubelet: the node was low on memory; container step-0 used "
        "3512Mi, request 1Gi); an evicted item runs again without using a retry, so it may "
        "never finish: set spec.stages[0].resources.requests.memory to what the step uses, "
        "or a limits.memory so that it fails as OOMKilled and uses its retries"), text
    assert len(text) <= 400  # stages[].waiting keeps it whole


def test_disk_pressure_names_the_scratch_or_the_request() -> None:
    disk = "The node was low on resource: ephemeral-storage. Threshold quantity: 2Gi. "
    pods = [pod(0, 0, message=disk), pod(0, 1, message=disk)]
    with_scratch = one_stage(scratch={"size": "10Gi"})
    found = evicted.summary(with_scratch.stages[0], 0, pods)
    assert found and "set spec.stages[0].scratch.size to what the step writes" in found[1]
    found = evicted.summary(one_stage().stages[0], 0, pods)
    assert found and "resources.requests.ephemeral-storage" in found[1]
    pids = "The node was low on resource: pids. "
    found = evicted.summary(one_stage().stages[0], 0, [pod(0, 0, message=pids)] * 2)
    assert found and "its node ran out of pids" in found[1] and "stages[0].pool" in found[1]
    assert "(kubelet: the node was low on pids)" in found[1]


class CountingKube(RecordingKube):
    """Counts LISTs of Failed pods: the reads this feature adds."""

    failed_lists = 0

    def _call(self, method: str, path: str, body: Any = None, query: Any = (),
              content_type: str | None = None, accept: str = "application/json") -> Obj:
        if method == "GET" and path.endswith("/pods") and "status.phase=Failed" in str(query):
            self.failed_lists += 1
        return super()._call(method, path, body, query, content_type, accept)


def test_the_run_says_so_reading_failed_pods_once_a_minute_at_most() -> None:
    run = manifest([stage("sim", forEach={"items": ["a", "b", "c", "d"]},
                          resources={"requests": {"memory": "1Gi"}})], name="nightly")
    run["metadata"].update(uid="run-uid", generation=1)
    kube = CountingKube([run])
    config = OperatorConfig(runner_image="runner:dev")
    state = pipelinerun.LoopState()
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    (job,) = [o for o in kube.store.values() if o["kind"] == "Job"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    job["status"] = {"active": 2, "ready": 2, "startTime": "2026-11-29T12:00:00Z"}
    kube.put(job)
    for n in range(3):
        kube.put(pod(1, n, labels=labels))

    def said() -> tuple[dict[str, Any], Mapping[str, Any]]:
        status = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, NS,
                                      "nightly")]["status"]
        return status["stages"][0], cond.find(status["conditions"], cond.PROGRESSING) or {}

    out = pipelinerun.reconcile(kube, config, NS, "nightly", state)
    assert kube.failed_lists == 0  # the first read is READ_SECONDS after the Job runs
    # ... with a pass then, even if nothing else moves.
    assert out.requeue_after is not None and out.requeue_after <= evicted.READ_SECONDS
    assert "waiting" not in said()[0]
    jname = job["metadata"]["name"]
    state.pods.evictions[jname] = (0.0, None)  # READ_SECONDS later
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    assert kube.failed_lists == 1
    record, progressing = said()
    assert "item index 1 was evicted 3 times" in record["waiting"], record
    # Items do run again (the pressure may be a neighbour's): still progressing.
    assert (progressing["status"], progressing["reason"]) == (cond.TRUE, "PodsEvicted")
    assert "spec.stages[0].resources.requests.memory" in progressing["message"]
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    assert kube.failed_lists == 1  # not due again: the finding stands meanwhile
    assert "item index 1 was evicted" in said()[0]["waiting"]
    job["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    job["status"].update(succeeded=4, active=0, ready=0,
                         completionTime="2026-11-29T12:09:00Z")
    kube.put(job)
    pipelinerun.reconcile(kube, config, NS, "nightly", state)
    assert jname not in state.pods.evictions
    assert "waiting" not in said()[0]
