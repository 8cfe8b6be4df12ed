from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.api import names
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.nodepools import Usage, render_virtualcluster
from tests.golden_util import check_golden
from tests.unit.vcfixtures import POOLS, vc

AWS_CRDS = Path("/root/go/pkg/mod/github.com/aws/karpenter-provider-aws@v1.14.1/pkg/apis/crds")
KWOK_CRDS = Path("/root/go/pkg/mod/sigs.k8s.io/karpenter@v1.14.1/kwok/apis/crds")


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def req(np: dict[str, Any], key: str) -> dict[str, Any] | None:
    for r in np["spec"]["template"]["spec"]["requirements"]:
        if r["key"] == key:
            return dict(r)
    return None


@pytest.mark.parametrize("provider", ["aws", "kwok"])
@pytest.mark.parametrize("case", sorted(POOLS))
def test_golden(case: str, provider: str) -> None:
    objs = render_virtualcluster(vc(POOLS[case]), provider)  # type: ignore[arg-type]
    check_golden(f"virtualcluster/{case}-{provider}.yaml", objs)


def test_static_renders_nothing() -> None:
    assert render_virtualcluster(vc(*POOLS.values()), "static") == []


def test_pool_contract_labels_and_taint() -> None:
    (np,) = by_kind(render_virtualcluster(vc(POOLS["spot-compute"]), "aws"), "NodePool")
    tmpl = np["spec"]["template"]
    assert tmpl["metadata"]["labels"][names.LABEL_POOL] == "workers"
    assert tmpl["metadata"]["labels"][names.LABEL_VIRTUAL_CLUSTER] == "snfactory"
    assert {"key": names.TAINT_POOL, "value": "workers", "effect": "NoSchedule"} in tmpl[
        "spec"]["taints"]
    assert np["spec"]["limits"] == {"cpu": "64"}
    assert np["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert req(np, "karpenter.sh/capacity-type") == {
        "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
    assert req(np, "karpenter.k8s.aws/instance-category")["values"] == ["c"]  # type: ignore[index]


def test_user_labels_cannot_override_ours() -> None:
    pool = {**POOLS["spot-compute"], "labels": {names.LABEL_POOL: "other", "team": "a"}}
    (np,) = by_kind(render_virtualcluster(vc(pool), "aws"), "NodePool")
    labels = np["spec"]["template"]["metadata"]["labels"]
    assert labels[names.LABEL_POOL] == "workers" and labels["team"] == "a"


def test_spot_then_on_demand_two_weighted_pools() -> None:
    nps = by_kind(render_virtualcluster(vc(POOLS["spot-then-on-demand"]), "aws"), "NodePool")
    assert len(nps) == 2
    spot, od = nps
    assert req(spot, "karpenter.sh/capacity-type")["values"] == ["spot"]  # type: ignore[index]
    assert req(od, "karpenter.sh/capacity-type")["values"] == ["on-demand"]  # type: ignore[index]
    assert spot["spec"]["weight"] > od["spec"]["weight"]
    assert spot["spec"]["template"]["spec"]["nodeClassRef"] == od["spec"]["template"]["spec"][
        "nodeClassRef"]


def test_halves_share_one_limit() -> None:
    objs = render_virtualcluster(vc(POOLS["spot-then-on-demand"]), "aws")
    spot, od = by_kind(objs, "NodePool")
    assert od["spec"]["limits"] == {"cpu": "128", "nodes": "20"}
    usage = {spot["metadata"]["name"]: Usage(cpu=100, memory_bytes=0, nodes=15)}
    spot2, od2 = by_kind(
        render_virtualcluster(vc(POOLS["spot-then-on-demand"]), "aws", usage=usage), "NodePool")
    assert spot2["spec"]["limits"] == {"cpu": "128", "nodes": "20"}
    assert od2["spec"]["limits"] == {"cpu": "28", "nodes": "5"}
    over = {spot["metadata"]["name"]: Usage(cpu=200.5, nodes=30)}
    (_, od3) = by_kind(
        render_virtualcluster(vc(POOLS["spot-then-on-demand"]), "aws", usage=over), "NodePool")
    assert od3["spec"]["limits"] == {"cpu": "0", "nodes": "0"}


def test_kwok_arch_and_families() -> None:
    objs = render_virtualcluster(vc(POOLS["spot-compute"]), "kwok")
    (np,) = by_kind(objs, "NodePool")
    # KWOK's Karpenter labels nodes with the catalog's EC2 spelling.
    assert req(np, "kubernetes.io/arch")["values"] == ["x86_64"]  # type: ignore[index]
    fams = req(np, "karpenter.kwok.sh/instance-family")["values"]  # type: ignore[index]
    assert "c6i" in fams and all(f.startswith("c") for f in fams)
    assert not any(r["key"].startswith("karpenter.k8s.aws/") for r in
                   np["spec"]["template"]["spec"]["requirements"])
    assert by_kind(objs, "KWOKNodeClass")


def test_raid0_and_placement_on_aws() -> None:
    objs = render_virtualcluster(vc(POOLS["memory"], POOLS["cluster-compute"]), "aws")
    mem_nc, cc_nc = by_kind(objs, "EC2NodeClass")
    assert mem_nc["spec"]["instanceStorePolicy"] == "RAID0"
    mem_np = by_kind(objs, "NodePool")[0]
    assert req(mem_np, "karpenter.k8s.aws/instance-local-nvme") is not None
    assert cc_nc["spec"]["placementGroupSelector"] == {
        "name": vcnames.placement_group_name("physics", "snfactory", "mpi")}
    assert "placementGroupSelector" not in mem_nc["spec"]
    assert cc_nc["spec"]["tags"][vcnames.TAG_NAMESPACE] == "physics"
    assert cc_nc["spec"]["role"] == "KarpenterNodeRole-demo"


def test_names_unique_across_namespaces_and_short() -> None:
    long = "x" * 60
    a = vcnames.nodepool_name("ns-a", long, "workers", "ondemand")
    b = vcnames.nodepool_name("ns-b", long, "workers", "ondemand")
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert vcnames.nodepool_name("a-b", "c", "p") != vcnames.nodepool_name("a", "b-c", "p")
    assert vcnames.nodepool_name("ns", "vc", "p") == vcnames.nodepool_name("ns", "vc", "p")


def _schema_paths(schema: dict[str, Any], obj: Any, path: str) -> list[str]:
    """Fields of `obj` that the structural schema does not know (typos, wrong level)."""
    bad: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in obj.items():
            if k == "metadata" and "." not in path:
                continue  # ObjectMeta: not in the CRD schema
            if props is not None and k in props:
                bad += _schema_paths(props[k], v, f"{path}.{k}")
            elif isinstance(extra, dict):
                bad += _schema_paths(extra, v, f"{path}.{k}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                bad.append(f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad += _schema_paths(schema.get("items", {}), v, f"{path}[{i}]")
    return bad


@pytest.mark.parametrize("provider", ["aws", "kwok"])
def test_rendered_fields_exist_in_karpenter_crds(provider: str) -> None:
    files = {"NodePool": AWS_CRDS / "karpenter.sh_nodepools.yaml",
             "EC2NodeClass": AWS_CRDS / "karpenter.k8s.aws_ec2nodeclasses.yaml",
             "KWOKNodeClass": KWOK_CRDS / "karpenter.kwok.sh_kwoknodeclasses.yaml"}
    if not all(p.exists() for p in files.values()):
        pytest.skip("Karpenter modules not in the Go module cache")
    schemas = {k: yaml.safe_load(p.read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"] for k, p in files.items()}
    objs = render_virtualcluster(vc(*POOLS.values()), provider)  # type: ignore[arg-type]
    for o in objs:
        assert _schema_paths(schemas[o["kind"]], o, o["kind"]) == []
