"""A VirtualCluster pool's own taints (spec.pools[].taints) keep other pods off its
nodes, not the stages that name the pool: their Jobs' and MPIJobs' pods tolerate them.
Before, they tolerated only the pool taint, and Karpenter never launched a node for them
(seen on the local cluster: tests/integration/test_virtualcluster.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nightshift.api import names
from nightshift.pipelinerun.plan import plan
from tests.bad_pipelineruns import stage
from tests.unit.test_plan import items_for, make_run, observe

VC = {"spec": {"pools": [
    {"name": "general", "class": "general"},
    {"name": "imaging", "class": "memory", "taints": [
        {"key": "example.org/dedicated", "value": "imaging", "effect": "NoSchedule"},
        {"key": "example.org/big-memory", "effect": "NoExecute"}]}]},
      "status": {"mode": "static"}}
POOL_TOLERATION = {"key": names.TAINT_POOL, "operator": "Equal", "value": "imaging",
                   "effect": "NoSchedule"}
OWN = [{"key": "example.org/dedicated", "operator": "Equal", "value": "imaging",
        "effect": "NoSchedule"},
       {"key": "example.org/big-memory", "operator": "Exists", "effect": "NoExecute"}]


def templates(*stages: dict[str, Any], vc: dict[str, Any] = VC
              ) -> dict[str, list[dict[str, Any]]]:
    """Each created object's pod templates, by its stage."""
    run = make_run(list(stages), virtualCluster="chiles")
    p = plan(replace(observe(run, items=items_for(run, *(s["name"] for s in stages))),
                     virtual_clusters={"chiles": vc}))
    out: dict[str, list[dict[str, Any]]] = {}
    for m in p.apply:
        st = str((m["metadata"].get("labels") or {}).get(names.LABEL_STAGE))
        if m["kind"] == "Job":
            out[st] = [m["spec"]["template"]["spec"]]
        elif m["kind"] == "MPIJob":
            out[st] = [r["template"]["spec"] for r in m["spec"]["mpiReplicaSpecs"].values()]
    return out


def test_a_stage_on_a_tainted_pool_tolerates_its_taints() -> None:
    got = templates(stage("reduce", pool="imaging"), stage("split", pool="general"))
    (pod,) = got["reduce"]
    assert pod["tolerations"] == [POOL_TOLERATION, *OWN]
    (plain,) = got["split"]
    assert [t["key"] for t in plain["tolerations"]] == [names.TAINT_POOL]


def test_mpi_launcher_and_workers_tolerate_them_too() -> None:
    got = templates({"name": "ep", "image": "mpi:dev", "pool": "imaging",
                     "mpi": {"workers": 2}, "steps": [{"name": "run", "command": ["ep"]}]})
    assert len(got["ep"]) == 2
    for pod in got["ep"]:
        assert pod["tolerations"] == [POOL_TOLERATION, *OWN]


def _terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])


def test_on_a_karpenter_virtual_cluster_only_its_own_nodes_are_the_pools() -> None:
    """status.mode karpenter: the hand-labeled term goes (api/nodeaffinity),
    from Jobs and MPIJobs alike; static keeps it; not yet reconciled, no Job is made."""
    stages = (stage("reduce", pool="imaging"),
              {"name": "ep", "image": "mpi:dev", "pool": "imaging", "mpi": {"workers": 2},
               "steps": [{"name": "run", "command": ["ep"]}]})
    karpenter = templates(*stages, vc={**VC, "status": {"mode": "karpenter"}})
    for pod in [*karpenter["reduce"], *karpenter["ep"]]:
        (term,) = _terms(pod)
        assert [e["key"] for e in term["matchExpressions"]] == [
            names.LABEL_VIRTUAL_CLUSTER, names.LABEL_VIRTUAL_CLUSTER_NAMESPACE]
        assert pod["tolerations"] == [POOL_TOLERATION, *OWN]  # taints still read
    got = templates(*stages, vc=VC)
    for pod in [*got["reduce"], *got["ep"]]:
        assert len(_terms(pod)) == 2
    assert templates(*stages, vc={"spec": VC["spec"]}) == {}
