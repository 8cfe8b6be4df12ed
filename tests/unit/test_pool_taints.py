"""A VirtualCluster pool's own taints (spec.pools[].taints) keep other pods off its
nodes, not the stages and SharedStorages that name the pool: their Jobs', MPIJobs' and
storage workloads' pods tolerate them. Before, they tolerated only the pool taint, and
Karpenter never launched a node for them (seen on the local cluster:
tests/integration/test_virtualcluster.py); a storage's client DaemonSet left the pool's
nodes out and still said it was mounted on all of them."""

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


def test_a_storage_on_tainted_pools_tolerates_their_taints() -> None:
    from nightshift.sharedstorage.objects import Storage
    from nightshift.sharedstorage.render import render_storage
    from nightshift.sharedstorage.validate import effective_squid_cidrs
    from tests.bad_sharedstorages import FACTS, GOOD

    for case in ("nfs-dedicated", "gluster-nufa", "cvmfs-eks"):
        obj = GOOD[case]
        spec = Storage.of(obj).spec
        pools = {p for p in (spec.nfs.pool if spec.nfs else None,
                             *(spec.glusterfs.clients.pools if spec.glusterfs else ()),
                             spec.glusterfs.pool if spec.glusterfs else None,
                             *(spec.cvmfs.client.pools if spec.cvmfs else ()),
                             spec.cvmfs.squid.pool if spec.cvmfs else None) if p}
        taints = {p: [{"key": "example.org/dedicated", "value": p, "effect": "NoSchedule"}]
                  for p in pools}
        objs = render_storage(obj, platform="aws", pool_taints=taints,
                              squid_cidrs=effective_squid_cidrs(spec, FACTS))
        plain = render_storage(obj, platform="aws",
                               squid_cidrs=effective_squid_cidrs(spec, FACTS))
        # The pods placed on pools (a squid without spec.cvmfs.squid.pool is not).
        with_pods = [(o, q) for o, q in zip(objs, plain, strict=True)
                     if (q.get("spec") or {}).get("template", {}).get("spec", {}).get(
                         "tolerations")]
        assert with_pods, case
        for o, q in with_pods:
            tols = o["spec"]["template"]["spec"]["tolerations"]
            mine = [t for t in tols if t["key"] == names.TAINT_POOL]
            assert mine == q["spec"]["template"]["spec"]["tolerations"], (case, o["kind"])
            own = [{"key": "example.org/dedicated", "operator": "Equal", "value": t["value"],
                    "effect": "NoSchedule"} for t in mine]
            assert tols == [*mine, *own], (case, o["kind"], o["metadata"]["name"])
        kinds = sorted(o["kind"] for o, _ in with_pods)
        assert "DaemonSet" in kinds or case == "nfs-dedicated", (case, kinds)


def test_the_gluster_volume_job_tolerates_its_pools_taints() -> None:
    from nightshift.sharedstorage import gluster, glustervolume
    from nightshift.sharedstorage.objects import Storage
    from tests.bad_sharedstorages import GOOD

    plain = Storage.of(GOOD["gluster-nufa"])
    g = plain.spec.glusterfs
    assert g is not None
    taint = {"key": "example.org/dedicated", "value": "io", "effect": "NoExecute"}
    st = Storage.of(GOOD["gluster-nufa"], pool_taints={g.pool: [taint]})
    servers = [gluster.ServerPod(name=f"{gluster.server_name(st)}-{i}", ip=f"10.0.0.{i + 1}",
                                 ready=True, node=f"node-{i}") for i in range(g.servers)]
    job = glustervolume.volume_job(st, servers)
    assert job is not None
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"key": names.TAINT_POOL, "operator": "Equal", "value": g.pool, "effect": "NoSchedule"},
        {"key": "example.org/dedicated", "operator": "Equal", "value": "io",
         "effect": "NoExecute"}]


def test_the_storage_planner_passes_the_facts_taints_to_what_it_applies() -> None:
    from nightshift.sharedstorage.plan import plan as storage_plan
    from tests.bad_sharedstorages import FACTS
    from tests.unit.test_sharedstorage_plan import observed, storage

    obj = storage("cvmfs-eks")
    taint = {"key": "example.org/dedicated", "effect": "NoSchedule"}
    facts = replace(FACTS, pool_taints={p: [taint] for p in
                                        obj["spec"]["cvmfs"]["client"]["pools"]})
    p = storage_plan(replace(observed(obj), facts=facts))
    (client,) = [m for m in p.apply if m["kind"] == "DaemonSet"]
    assert {"key": "example.org/dedicated", "operator": "Exists", "effect": "NoSchedule"} in (
        client["spec"]["template"]["spec"]["tolerations"])
