"""Item scratch on local disk (issue 12): a stage's `scratch.size` makes its work volume
an emptyDir with that sizeLimit and each step request that much ephemeral storage, so
the scheduler and Karpenter place the pod where that much local disk is free; on a
localDisk: raid0 pool that disk is the instance-store RAID0 array (Karpenter's
ephemeral-storage for such nodes is the array's size). Without it nothing is added."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.api import names
from nightshift.pipelinerun import references
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import stage
from tests.unit.test_plan import items_for, jobs_of, make_run, observe

VC: dict[str, Any] = {
    "spec": {"pools": [{"name": "nvme", "class": "compute", "localDisk": "raid0"},
                       {"name": "plain", "class": "compute"}]},
    "status": {"mode": "karpenter"}}
S3 = [{"name": "raw", "s3": {"bucket": "raw"}}]
TWO_STEPS = [{"name": "calibrate", "command": ["calib"]}, {"name": "reduce", "command": ["r"]}]


def pods(*stages: dict[str, Any]) -> dict[str, dict[str, Any]]:
    run = make_run(list(stages), virtualCluster="chiles", storage=S3)
    p = plan(replace(observe(run, items=items_for(run, *(s["name"] for s in stages))),
                     virtual_clusters={"chiles": VC}))
    return {j["metadata"]["labels"][names.LABEL_STAGE]: j["spec"]["template"]["spec"]
            for j in jobs_of(p)}


def work(pod: dict[str, Any]) -> dict[str, Any]:
    (vol,) = [v for v in pod["volumes"] if v["name"] == "nightshift-work"]
    return dict(vol)


def steps(pod: dict[str, Any]) -> list[dict[str, Any]]:
    runner = ("nightshift-stage-in", "nightshift-commit")
    return [c for c in [*pod.get("initContainers", []), *pod["containers"]]
            if c["name"] not in runner]


def ephemeral(c: dict[str, Any]) -> Any:
    return ((c.get("resources") or {}).get("requests") or {}).get("ephemeral-storage")


def test_scratch_on_a_raid0_pool_is_a_sized_empty_dir_and_a_request() -> None:
    got = pods(stage("reduce", pool="nvme", steps=TWO_STEPS, scratch={"size": "200Gi"},
                     outputs=[{"storage": "raw", "path": "out/{item}/"}]),
               stage("count", pool="plain"))
    reduce, count = got["reduce"], got["count"]
    assert reduce["nodeSelector"] == {names.LABEL_POOL: "nvme"}
    assert work(reduce) == {"name": "nightshift-work", "emptyDir": {"sizeLimit": "200Gi"}}
    assert [ephemeral(c) for c in steps(reduce)] == ["200Gi", "200Gi"]
    # The runner's containers ask for none: the steps' request is the pod's.
    assert [ephemeral(c) for c in reduce["initContainers"][:2]] == [None, None]
    assert not [v for v in reduce["volumes"] if "hostPath" in v]
    # A one-step stage without scratch or runner, on a pool without local disk: no work
    # volume at all (jobs.work_volume_needed), and nothing requested.
    assert not [v for v in count["volumes"] if v["name"] == "nightshift-work"]
    assert all(m["name"] != "nightshift-work" for c in steps(count)
               for m in c.get("volumeMounts", []))
    assert [ephemeral(c) for c in steps(count)] == [None]
    assert all("resources" not in c for c in steps(count))


def test_scratch_without_a_runner_sizes_the_steps_own_work_volume() -> None:
    pod = pods(stage("count", pool="nvme", scratch={"size": "50G"}))["count"]
    assert work(pod) == {"name": "nightshift-work", "emptyDir": {"sizeLimit": "50G"}}
    assert [ephemeral(c) for c in steps(pod)] == ["50G"]


def test_a_request_the_stage_names_itself_wins_and_the_rest_stays() -> None:
    pod = pods(stage("reduce", pool="nvme", scratch={"size": "200Gi"}, resources={
        "requests": {"cpu": "2", "ephemeral-storage": "250Gi"},
        "limits": {"memory": "8Gi"}}))["reduce"]
    (step,) = steps(pod)
    assert step["resources"] == {"requests": {"cpu": "2", "ephemeral-storage": "250Gi"},
                                 "limits": {"memory": "8Gi"}}
    assert work(pod)["emptyDir"] == {"sizeLimit": "200Gi"}


CRD = Path(__file__).parents[2] / "crds" / "pipelinerun.yaml"


@pytest.mark.parametrize(("size", "ok"), [
    ("200Gi", True), ("1500G", True), ("2Ti", True), ("1", True),
    ("0", False), ("0Gi", False), ("-1Gi", False), ("1.5Gi", False), ("200gi", False),
    ("", False)])
def test_the_crd_admits_only_positive_whole_quantities(size: str, ok: bool) -> None:
    crd = yaml.safe_load(CRD.read_text())
    stage_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"]["properties"]["stages"]["items"]["properties"]
    pattern = stage_schema["scratch"]["properties"]["size"]["pattern"]
    assert bool(re.fullmatch(pattern, size)) is ok


def aws_vc(node_class: dict[str, Any] | None = None, provider: str = "aws") -> dict[str, Any]:
    return {"spec": {**VC["spec"], "nodeClass": node_class or {}},
            "status": {"provider": provider, "mode": "karpenter"}}


def waiting_for(vc: dict[str, Any], size: str, pool: str | None) -> references.References:
    spec = PipelineRunSpec.model_validate(make_run(
        [stage("other"), stage("reduce", scratch={"size": size},
                               **({"pool": pool} if pool else {}))],
        virtualCluster="chiles")["spec"])
    return references.check(spec, "physics", {"chiles": vc})


def test_scratch_larger_than_the_root_volume_of_a_pool_without_local_disk_waits() -> None:
    r = waiting_for(aws_vc(), "50Gi", "plain")
    assert r.waiting_stages == {"reduce"} and r.reason == references.REASON_SCRATCH
    (msg,) = r.waiting
    assert msg.startswith("spec.stages[1].scratch.size: 50Gi does not fit the nodes of pool "
                          "'plain' of VirtualCluster 'chiles'")
    assert "root volume (20Gi" in msg and "localDisk: raid0" in msg
    # The pool a stage without `pool` gets (the first) is the one checked.
    assert waiting_for(aws_vc(), "50Gi", None).waiting_stages == frozenset()  # nvme: raid0
    # It fits; a raid0 pool (Karpenter matches its instance stores); not AWS; a root
    # volume large enough; a mapping list without a root volume (unsure): no wait.
    root = {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True,
                                     "ebs": {"volumeSize": "100Gi"}}]}
    for vc, size, pool in ((aws_vc(), "20Gi", "plain"), (aws_vc(), "5Ti", "nvme"),
                           (aws_vc(provider="kwok"), "50Gi", "plain"),
                           (aws_vc(root), "50Gi", "plain"),
                           (aws_vc({"blockDeviceMappings": [{"deviceName": "/dev/xvdb",
                                                             "ebs": {}}]}), "50Gi", "plain")):
        assert waiting_for(vc, size, pool).waiting == [], (vc, size, pool)
    assert waiting_for(aws_vc(root), "101Gi", "plain").waiting_stages == {"reduce"}
