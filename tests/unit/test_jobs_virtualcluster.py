"""A stage in a VirtualCluster lands only on that VirtualCluster's nodes (or static ones)."""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import jobs
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import run as manifest
from tests.bad_pipelineruns import stage

RUN = it.RunRef(name="nightly", namespace="physics", uid="uid-1")


def _pod(virtual_cluster: str | None, pool: jobs.PoolNodes = jobs.NO_POOL) -> dict[str, Any]:
    extra = {"virtualCluster": virtual_cluster} if virtual_cluster else {}
    sp = PipelineRunSpec.model_validate(manifest([stage("ifu", pool="workers")], **extra)["spec"])
    job = jobs.render_job(run=RUN, spec=sp, stage=sp.stages[0], attempt=0, completions=3,
                          item_configmaps=["cm"], parallelism=3, suspend=False,
                          runner_image="runner:dev", pool=pool)
    return dict(job["spec"]["template"]["spec"])


def _matches(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a node with these labels passes the pod's required node affinity."""
    terms = pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def ok(e: dict[str, Any]) -> bool:
        if e["operator"] == "In":
            return labels.get(e["key"]) in e["values"]
        return e["key"] not in labels  # DoesNotExist
    return any(all(ok(e) for e in t["matchExpressions"]) for t in terms)


def test_without_a_virtual_cluster_the_pool_label_alone_selects() -> None:
    pod = _pod(None)
    assert pod["nodeSelector"] == {names.LABEL_POOL: "workers"}
    assert "affinity" not in pod


def test_with_a_virtual_cluster_other_namespaces_pools_are_excluded() -> None:
    pod = _pod("snfactory")
    assert pod["nodeSelector"] == {names.LABEL_POOL: "workers"}
    vc, ns = names.LABEL_VIRTUAL_CLUSTER, names.LABEL_VIRTUAL_CLUSTER_NAMESPACE
    assert _matches(pod, {vc: "snfactory", ns: "physics"})
    assert not _matches(pod, {vc: "snfactory", ns: "biology"}), "same name, other namespace"
    assert not _matches(pod, {vc: "other", ns: "physics"})
    assert _matches(pod, {}), "hand-labeled static nodes carry no VirtualCluster label"


def test_where_karpenter_makes_the_nodes_hand_labeled_ones_are_not_the_pools() -> None:
    pod = _pod("snfactory", jobs.PoolNodes(karpenter=True))
    vc, ns = names.LABEL_VIRTUAL_CLUSTER, names.LABEL_VIRTUAL_CLUSTER_NAMESPACE
    assert _matches(pod, {vc: "snfactory", ns: "physics"})
    # Another collaboration's static `workers` node: the pool label alone no longer does.
    assert not _matches(pod, {names.LABEL_POOL: "workers"})
    terms = pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1  # Karpenter then reports the pool's own reason (unlaunched.py)


def test_a_stage_with_a_runner_has_one_work_volume() -> None:
    storage = [{"name": "raw", "s3": {"bucket": "raw-data"}}]
    st = stage("ifu", inputs=[{"storage": "raw", "path": "nights/{item}/", "mode": "stage"}])
    sp = PipelineRunSpec.model_validate(manifest([st], storage=storage)["spec"])
    job = jobs.render_job(run=RUN, spec=sp, stage=sp.stages[0], attempt=0, completions=3,
                          item_configmaps=["cm"], parallelism=3, suspend=False,
                          runner_image="runner:dev")
    pod = job["spec"]["template"]["spec"]
    volumes = [v["name"] for v in pod["volumes"]]
    assert len(volumes) == len(set(volumes)), volumes
    for c in [*pod["initContainers"], *pod["containers"]]:
        mounts = [m["name"] for m in c.get("volumeMounts", [])]
        assert len(mounts) == len(set(mounts)), (c["name"], mounts)
