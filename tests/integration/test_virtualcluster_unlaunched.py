"""A stage on a VirtualCluster's pool that no instance type of the pool can hold: the
real Karpenter's FailedScheduling reaches the stage and the run (pipelinerun/
unlaunched.py), where the scheduler alone says only that no node fits now and the
status said nodes may still be launching.
"""

from __future__ import annotations

from nightshift.kube import Kube
from tests.clusterutil import Kubectl
from tests.integration.prutil import get_run, stage_status, wait_phase, wait_progressing
from tests.integration.vcutil import (
    cleanup,
    create_vc,
    ready,
    run_manifest,
    stage,
    suffix,
    vc_manifest,
)

__all__ = ["cleanup"]


def test_a_pod_no_instance_type_holds_is_named_in_karpenters_words(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str]) -> None:
    pool = f"small-{suffix()}"
    # No maxCPU: the run's own reference check (references._pool_limits) lets it start,
    # and only Karpenter knows that no compute instance has 1000 CPUs.
    create_vc(kubectl, cleanup, namespace, vc_manifest("fits", [
        {"name": pool, "class": "compute", "capacity": "on-demand"}]))
    ready(kube, namespace, "fits")
    kubectl.apply(run_manifest("huge", "fits", [stage("s", pool, 2, "1000")]), namespace)

    prog = wait_progressing(kube, namespace, "huge", "WaitingForNodes",
                            containing="Karpenter found no node to launch", timeout=180)
    assert prog["status"] == "True", prog  # a node may come once the VirtualCluster changes
    waiting = stage_status(get_run(kube, namespace, "huge"), "s")["waiting"]
    assert waiting == prog["message"]
    assert waiting.startswith("stage s: its pods do not start: pod huge-"), waiting
    # Karpenter's own reason (v1.14.1's words), without the NodePool's requirement list:
    # the pods' node affinity has the VirtualCluster's term alone (status.mode karpenter).
    assert ('asks for cpu 1000: Karpenter found no node to launch for it: no instance type '
            'has enough resources, resources={"cpu":"1k","pods":"1"}; check') in waiting, waiting
    assert waiting.endswith(f"check spec.stages[0].resources against pool '{pool}' of "
                            "VirtualCluster 'fits': its instance sizes and maxCPU, "
                            "maxMemory, maxNodes"), waiting
    kubectl("-n", namespace, "patch", "pipelinerun", "huge", "--type=merge", "-p",
            '{"spec": {"cancel": true}}')
    run = wait_phase(kube, namespace, "huge", {"Cancelled"}, 60)
    assert "waiting" not in stage_status(run, "s"), run["status"]
