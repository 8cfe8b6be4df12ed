"""VirtualClusters on the local cluster, their lifecycle: deletion that waits for
running runs (or is forced), a hand-edited NodePool restored, an unexpected error shown
as a condition, a run waiting for its VirtualCluster, and a seed-type pool's nodes
(test_virtualcluster.py has the pools and their nodes, static mode and bad specs).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightshift.kube import Kube
from nightshift.virtualcluster.catalog import CLASS_CATEGORIES, category_of
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import Cluster, OperatorProcess
from tests.integration.prutil import get_run, wait_progressing
from tests.integration.vcutil import (
    KWOK_FAMILY,
    TERMINAL,
    cleanup,
    condition,
    create_vc,
    get_vc,
    owner,
    phase,
    pool_objects,
    ready,
    run_manifest,
    run_on_pool,
    stage,
    static_node,
    succeeds,
    suffix,
    vc_manifest,
)

__all__ = ["cleanup", "static_node"]


def test_deletion_waits_for_running_runs(kube: Kube, kubectl: Kubectl, namespace: str,
                                         cleanup: list[str]) -> None:
    u = suffix()
    pool = f"cpu-{u}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("doomed", [
        {"name": pool, "class": "compute", "maxCPU": 8, "consolidateAfter": "5s"}]))
    ready(kube, namespace, "doomed")
    run_on_pool(kube, kubectl, namespace, "doomed", "long", pool, 10)
    kubectl("delete", "-n", namespace, "virtualcluster", "doomed", "--wait=false")
    kept = wait_for("the Deleting condition naming the run", lambda: (
        c := condition(get_vc(kube, namespace, "doomed"), "Deleting")).get("reason") == "InUse"
        and c, 30)
    assert "long" in kept["message"] and "nightshift.io/force-delete" in kept["message"]
    assert phase(kube, namespace, "long") not in TERMINAL
    assert pool_objects(kube, "NodePool", namespace, "doomed", pool)
    succeeds(kube, namespace, "long")
    wait_for("VirtualCluster doomed to be gone", lambda: get_vc(kube, namespace, "doomed")
             is None, 90)
    sel = owner(namespace, "doomed")
    assert not kube.list("karpenter.sh/v1", "NodePool", label_selector=sel)
    assert not kube.list("karpenter.kwok.sh/v1alpha1", "KWOKNodeClass", label_selector=sel)
    assert not kube.list("v1", "Node", label_selector=sel)


def test_a_pool_removed_while_a_run_uses_it_stays_until_the_run_ends(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str]) -> None:
    """The pool a running stage is on is taken out of spec.pools: its NodePool and node
    stay (the run's pods are not evicted), Ready says why, and they go once it ends."""
    u = suffix()
    keep, drop = f"cpu-{u}", f"old-{u}"
    pools = [{"name": keep, "class": "compute", "maxCPU": 8},
             {"name": drop, "class": "compute", "maxCPU": 8, "consolidateAfter": "5s"}]
    create_vc(kubectl, cleanup, namespace, vc_manifest("shrinks", pools))
    ready(kube, namespace, "shrinks")
    run_on_pool(kube, kubectl, namespace, "shrinks", "onold", drop, 20)
    kubectl.apply(vc_manifest("shrinks", pools[:1]), namespace)
    said = wait_for("Ready naming the kept pool", lambda: (
        c := condition(get_vc(kube, namespace, "shrinks"), "Ready")).get(
            "reason") == "RemovedPoolsInUse" and c, 30)
    assert said["message"] == (
        f"pool {drop} removed from spec.pools is kept (NodePool, node class and nodes) while "
        "runs use this VirtualCluster: onold; it goes once those end"), said
    assert pool_objects(kube, "NodePool", namespace, "shrinks", drop)
    succeeds(kube, namespace, "onold", "its pod was never evicted")
    wait_for("the removed pool's NodePool gone", lambda: not pool_objects(
        kube, "NodePool", namespace, "shrinks", drop), 90)
    # The pass that deletes the NodePool writes the status after it (146 ms later in the
    # run where reading it at once found the old reason): wait for that write.
    wait_for("Ready no longer naming the removed pool", lambda: condition(
        get_vc(kube, namespace, "shrinks"), "Ready")["reason"] != "RemovedPoolsInUse", 15)


def test_force_delete_skips_the_wait(kube: Kube, kubectl: Kubectl, namespace: str,
                                     cleanup: list[str]) -> None:
    pool = f"cpu-{suffix()}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("stuck", [
        {"name": pool, "class": "compute", "maxCPU": 8}]))
    ready(kube, namespace, "stuck")
    # Never schedulable (more CPU than the pool may hold): the run never ends by itself.
    kubectl.apply(run_manifest("never", "stuck", [stage("s", pool, 1, "100")]), namespace)
    kubectl("delete", "-n", namespace, "virtualcluster", "stuck", "--wait=false")
    wait_for("the Deleting condition", lambda: condition(
        get_vc(kube, namespace, "stuck"), "Deleting").get("reason") == "InUse", 30)
    kubectl("annotate", "-n", namespace, "virtualcluster", "stuck",
            "nightshift.io/force-delete=true")
    wait_for("VirtualCluster stuck to be gone", lambda: get_vc(kube, namespace, "stuck")
             is None, 60)
    assert phase(kube, namespace, "never") not in TERMINAL
    assert not kube.list("karpenter.sh/v1", "NodePool",
                         label_selector=owner(namespace, "stuck"))


def test_a_hand_edited_nodepool_is_restored_by_the_next_pass(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str]) -> None:
    pool = f"cpu-{suffix()}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("drift", [
        {"name": pool, "class": "compute", "maxCPU": 16}]))
    ready(kube, namespace, "drift")
    [np] = pool_objects(kube, "NodePool", namespace, "drift", pool)
    limit = np["spec"]["limits"]["cpu"]
    kubectl("patch", "nodepool", np["metadata"]["name"], "--type", "merge",
            "-p", '{"spec": {"limits": {"cpu": "99999"}}}')
    # Less than the resync interval (60 s): the NodePool's own event wakes the pass.
    wait_for("the NodePool's limit restored", lambda: (kube.get(
        "karpenter.sh/v1", "NodePool", np["metadata"]["name"]) or {})["spec"]["limits"]["cpu"]
        == limit, 30)


@pytest.fixture
def faulty_operator(cluster: Cluster, kubectl: Kubectl,
                    tmp_path: Path) -> Iterator[tuple[str, OperatorProcess]]:
    """An operator of its own, with a planted fault, on a namespace the session's
    operator does not watch."""
    ns = f"f-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", ns)
    op = OperatorProcess(cluster, tmp_path / "faulty.log",
                         module="tests.integration.faulty_operator", namespace=ns)
    op.start()
    yield ns, op
    kubectl("annotate", "-n", ns, "virtualcluster", "--all",
            "nightshift.io/force-delete=true", "--overwrite", check=False)
    kubectl("delete", "-n", ns, "virtualcluster", "--all", "--timeout=60s", check=False)
    op.stop()
    kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_an_unexpected_error_in_a_pass_is_retried_and_shown_as_a_condition(
        kube: Kube, kubectl: Kubectl,
        faulty_operator: tuple[str, OperatorProcess]) -> None:
    from tests.integration.faulty_operator import FAULT_ANNOTATION
    ns, op = faulty_operator
    pool = f"cpu-{suffix()}"
    manifest = vc_manifest("faulty", [{"name": pool, "class": "compute", "maxCPU": 8}])
    manifest["metadata"]["annotations"] = {FAULT_ANNOTATION: "true"}
    kubectl.apply(manifest, ns)
    cond = wait_for("ReconcileError=True", lambda: (c := condition(
        get_vc(kube, ns, "faulty"), "ReconcileError")).get("status") == "True" and c, 60)
    assert cond["reason"] == "ReconcileFailing"
    assert "planted fault: the VirtualCluster planner raised" in cond["message"]
    assert "backing off to once every" in cond["message"]
    assert op.proc is not None and op.proc.poll() is None, op.tail()
    # The loop kept retrying: the fault gone, the next pass succeeds and says so.
    kubectl("annotate", "-n", ns, "virtualcluster", "faulty", f"{FAULT_ANNOTATION}-")
    wait_for("ReconcileError=False", lambda: condition(
        get_vc(kube, ns, "faulty"), "ReconcileError").get("status") == "False", 60)
    ready(kube, ns, "faulty")
    assert "Traceback" in op.tail(400), "an unexpected error is logged with its traceback"


def test_a_run_waits_for_its_virtual_cluster_and_pool_naming_them(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str],
        static_node: tuple[str, str]) -> None:
    """Never a silent Pending (issue 12): the run made before its VirtualCluster, then
    with a VirtualCluster that lacks its pool, says which field and what to do, and
    starts nothing; given the pool, it runs."""
    _, pool = static_node
    vc = f"later-{suffix()}"
    kubectl.apply(run_manifest("early", vc, [stage("s", pool, 3, "1")]), namespace)
    c = wait_progressing(kube, namespace, "early", "WaitingForVirtualCluster",
                         "spec.virtualCluster: no VirtualCluster", 30)
    assert vc in c["message"]
    other = f"other-{suffix()}"
    create_vc(kubectl, cleanup, namespace, vc_manifest(
        vc, [{"name": other, "class": "compute"}], provider="static"))
    c = wait_progressing(kube, namespace, "early", "WaitingForVirtualCluster",
                         "spec.stages[0].pool", 60)
    assert f"has no pool '{pool}'" in c["message"] and other in c["message"]
    assert not kube.list("batch/v1", "Job", namespace)
    kubectl.apply(vc_manifest(vc, [{"name": pool, "class": "compute"}], provider="static"),
                  namespace)
    wait_for("run early to finish", lambda: phase(kube, namespace, "early") in TERMINAL, 120,
             explain=lambda: str(get_run(kube, namespace, "early").get("status")))
    assert phase(kube, namespace, "early") == "Succeeded"


def test_a_pool_like_a_seed_type_launches_nodes_at_least_that_large(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str]) -> None:
    """`like: c1.xlarge` (8 vCPU, 7 GiB, the supernova factory's type): a tiny stage
    still gets a current compute node of at least 8 CPUs, by Karpenter's own choice."""
    pool = f"seed-{suffix()}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("seeds", [
        {"name": pool, "class": "compute", "like": "c1.xlarge", "capacity": "on-demand",
         "maxCPU": 64, "consolidateAfter": "5s"}]))
    ready(kube, namespace, "seeds")
    kubectl.apply(run_manifest("tiny", "seeds", [stage("s", pool, 2, "100m")]), namespace)
    nodes: dict[str, dict[str, str]] = {}

    def finished() -> bool:
        for n in pool_objects(kube, "Node", namespace, "seeds", pool):
            nodes[n["metadata"]["name"]] = n["metadata"]["labels"]
        return phase(kube, namespace, "tiny") in TERMINAL

    wait_for("run tiny to finish", finished, 180, interval=0.5,
             explain=lambda: str(get_run(kube, namespace, "tiny").get("status")))
    assert phase(kube, namespace, "tiny") == "Succeeded"
    assert nodes
    for labels in nodes.values():
        assert int(labels["karpenter.kwok.sh/instance-cpu"]) >= 8, labels
        assert category_of(labels[KWOK_FAMILY]) in CLASS_CATEGORIES["compute"], labels
