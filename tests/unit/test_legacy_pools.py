"""Pools written like a seed's instance type (`like: cc2.8xlarge`): the class's current
generations with at least its vCPUs and memory, on AWS and on the KWOK catalog; an
unknown type or one of another class is a problem naming the field."""

from __future__ import annotations

from typing import Any

from nightshift.virtualcluster.catalog import InstanceCatalog, InstanceType
from nightshift.virtualcluster.nodepools import render_virtualcluster
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.validate import validate
from tests.unit.vcfixtures import vc

POOL = {"name": "npb", "class": "cluster-compute", "like": "cc2.8xlarge",
        "capacity": "on-demand"}


def requirements(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (np,) = [o for o in objs if o["kind"] == "NodePool"]
    return {r["key"]: r for r in np["spec"]["template"]["spec"]["requirements"]}


def test_aws_gets_at_least_the_seed_types_cpu_and_memory() -> None:
    reqs = requirements(render_virtualcluster(vc(POOL), "aws"))
    assert reqs["karpenter.k8s.aws/instance-cpu"] == {
        "key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["31"]}
    assert reqs["karpenter.k8s.aws/instance-memory"]["values"] == [str(int(60.5 * 1024) - 1)]
    assert reqs["karpenter.k8s.aws/instance-category"]["values"] == ["c", "hpc"]


def test_kwok_gets_the_catalog_types_at_least_as_large() -> None:
    gib = 2**30
    catalog = InstanceCatalog({t.name: t for t in [
        InstanceType("c6i.8xlarge", "c6i", "amd64", 32, 64 * gib),
        InstanceType("c6i.4xlarge", "c6i", "amd64", 16, 32 * gib),
        InstanceType("c7i.16xlarge", "c7i", "amd64", 64, 128 * gib),
        InstanceType("c5.9xlarge", "c5", "amd64", 36, 72 * gib)]})
    reqs = requirements(render_virtualcluster(vc(POOL), "kwok", catalog=catalog))
    assert reqs["node.kubernetes.io/instance-type"]["values"] == [
        "c5.9xlarge", "c6i.8xlarge", "c7i.16xlarge"]
    assert reqs["karpenter.kwok.sh/instance-cpu"]["values"] == ["31"]


def test_unknown_or_other_class_is_a_problem_naming_the_field() -> None:
    unknown = VirtualClusterSpec.model_validate(vc({**POOL, "like": "c9.huge"})["spec"])
    (p,) = validate(unknown, "aws")
    assert p.path == "spec.pools[0].like" and "cc2.8xlarge" in p.message
    other = VirtualClusterSpec.model_validate(vc({**POOL, "like": "c1.xlarge"})["spec"])
    (p,) = validate(other, "aws")
    assert "c1.xlarge is a compute type but the pool's class is cluster-compute" in p.message
