"""An item the kubelet evicts again and again for node pressure is named on the run.

The test plays the kubelet's eviction manager (KWOK nodes have none): it writes the
status the kubelet writes when a node runs low on memory (phase Failed, reason Evicted,
a DisruptionTarget condition by TerminationByKubelet, the kubelet's message) onto the
running pod of one item. The real Job controller's pod failure policy ignores that
pod, as it must for a spot interruption, and makes the item a new one: no retry used,
nothing counted. After the second eviction of that item the run says which item, the
kubelet's words and the field to change, within evicted.READ_SECONDS of the read.
"""

from __future__ import annotations

import json
from typing import Any

from nightshift.api import conditions as cond
from nightshift.api import names
from nightshift.kube import Kube
from nightshift.pipelinerun import evicted
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import get_run, jobs, pipelinerun, stage, stage_status

WORDS = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 58Mi. "
         "Container main was using 3Gi, request is 256Mi, has larger consumption of memory. ")
# The items run for ten minutes on KWOK: the test evicts them meanwhile. (KWOK draws a
# pod's run time between the two; without jitter-delay its default, 5 s, would end it.)
LONG = {"pod-complete.stage.kwok.x-k8s.io/delay": "600s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "600s"}


def _running(kube: Kube, namespace: str, index: int, not_: set[str]) -> str | None:
    pods = kube.list("v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=evict",
                     field_selector="status.phase=Running")
    return next((p["metadata"]["name"] for p in pods
                 if p["metadata"]["annotations"].get(names.JOB_COMPLETION_INDEX) == str(index)
                 and p["metadata"]["name"] not in not_), None)


def _pods(kube: Kube, namespace: str) -> str:
    """The run's pods and Job, for a wait that times out."""
    lines = []
    for p in kube.list("v1", "Pod", namespace, label_selector=f"{names.LABEL_RUN}=evict"):
        ann = p["metadata"].get("annotations") or {}
        lines.append(f"{p['metadata']['name']} {p['status'].get('phase')} "
                     f"index={ann.get(names.JOB_COMPLETION_INDEX)} "
                     f"ignored={ann.get('batch.kubernetes.io/job-index-ignored-failure-count')} "
                     f"finalizers={p['metadata'].get('finalizers')} "
                     f"made={p['metadata'].get('creationTimestamp')}")
    lines += [json.dumps(j.get("status")) for j in jobs(kube, namespace, "evict")]
    return "\n".join(lines)


def _evict(kubectl: Kubectl, namespace: str, pod: str) -> None:
    """What the kubelet's eviction manager writes (pkg/kubelet/eviction, v1.34)."""
    status: dict[str, Any] = {
        "phase": "Failed", "reason": "Evicted", "message": WORDS,
        "conditions": [{"type": "DisruptionTarget", "status": "True",
                        "reason": "TerminationByKubelet", "message": WORDS}]}
    kubectl("-n", namespace, "patch", "pod", pod, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))


def test_an_item_evicted_twice_for_memory_is_named_with_its_fix(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    kubectl.apply(pipelinerun("evict", namespace, [stage(
        "sim", pool, 2, podAnnotations=LONG,
        resources={"requests": {"cpu": "100m", "memory": "256Mi"}})]))
    gone: set[str] = set()
    for _ in range(2):
        victim = wait_for("item 0 running", lambda: _running(kube, namespace, 0, gone), 60,
                          explain=lambda: _pods(kube, namespace))
        _evict(kubectl, namespace, victim)
        gone.add(victim)
    # The Job controller ignored both: a third pod of item 0 runs, and nothing is counted.
    wait_for("item 0 made again", lambda: _running(kube, namespace, 0, gone), 60,
             explain=lambda: _pods(kube, namespace))
    (job,) = jobs(kube, namespace, "evict")
    assert not (job.get("status") or {}).get("failed"), job["status"]

    def said() -> str:
        return str(stage_status(get_run(kube, namespace, "evict"), "sim").get("waiting", ""))

    text = wait_for("the evictions named", lambda: said() if "evicted" in said() else None,
                    evicted.READ_SECONDS + 45)
    assert text == (
        "stage sim: item index 0 was evicted 2 times for node pressure (kubelet: the node "
        "was low on memory; container main used 3Gi, request 256Mi); an evicted item runs "
        "again without using a retry, so it may never finish: set spec.stages[0].resources"
        ".requests.memory to what the step uses, or a limits.memory so that it fails as "
        "OOMKilled and uses its retries"), text
    run = get_run(kube, namespace, "evict")
    progressing = cond.find(run["status"]["conditions"], cond.PROGRESSING) or {}
    assert (progressing.get("status"), progressing.get("reason")) == (cond.TRUE,
                                                                       evicted.REASON)
    assert run["status"]["phase"] == "Running"
    kubectl("-n", namespace, "delete", "nsrun", "evict", "--wait=false")
