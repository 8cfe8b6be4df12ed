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


def _pod(virtual_cluster: str | None) -> dict[str, Any]:
    extra = {"virtualCluster": virtual_cluster} if virtual_cluster else {}
    sp = PipelineRunSpec.model_validate(manifest([stage("ifu", pool="workers")], **extra)["spec"])
    job = jobs.render_job(run=RUN, spec=sp, stage=sp.stages[0], attempt=0, completions=3,
                          item_configmaps=["cm"], parallelism=3, suspend=False,
                          runner_image="runner:dev")
    return dict(job["spec"]["template"]["spec"])


def test_without_a_virtual_cluster_the_pool_label_alone_selects() -> None:
    pod = _pod(None)
    assert pod["nodeSelector"] == {names.LABEL_POOL: "workers"}
    assert "affinity" not in pod


def test_with_a_virtual_cluster_other_namespaces_pools_are_excluded() -> None:
    pod = _pod("snfactory")
    assert pod["nodeSelector"] == {names.LABEL_POOL: "workers"}
    terms = pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def matches(labels: dict[str, str]) -> bool:
        def ok(e: dict[str, Any]) -> bool:
            if e["operator"] == "In":
                return labels.get(e["key"]) in e["values"]
            return e["key"] not in labels  # DoesNotExist
        return any(all(ok(e) for e in t["matchExpressions"]) for t in terms)

    vc, ns = names.LABEL_VIRTUAL_CLUSTER, names.LABEL_VIRTUAL_CLUSTER_NAMESPACE
    assert matches({vc: "snfactory", ns: "physics"})
    assert not matches({vc: "snfactory", ns: "biology"}), "same name, other namespace"
    assert not matches({vc: "other", ns: "physics"})
    assert matches({}), "hand-labeled static nodes carry no VirtualCluster label"


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
