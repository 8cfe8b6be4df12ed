"""VirtualClusters on the local cluster: Karpenter's KWOK provider really launches the
nodes the rendered NodePools ask for, and the real operator runs the show.

Pool names carry a random suffix: pipeline pods select only nightshift.io/pool, so two
tests (or two engineers) using a pool "workers" at once would share nodes.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.catalog import CLASS_CATEGORIES, category_of, parse_quantity
from nightshift.virtualcluster.nodepools import render_virtualcluster
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.validate import validate
from tests.bad_virtualclusters import BAD
from tests.clusterutil import ROOT, Kubectl, wait_for
from tests.integration.vcutil import (
    CAPACITY_TYPE,
    KWOK_FAMILY,
    TERMINAL,
    claim_cpu,
    cleanup,
    condition,
    create_vc,
    get_vc,
    owner,
    phase,
    pool_objects,
    ready,
    run_manifest,
    run_state,
    stage,
    static_node,
    suffix,
    vc_manifest,
)

__all__ = ["cleanup", "static_node"]


def test_pools_launch_right_nodes_within_limits_and_run_completes(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str]) -> None:
    u = suffix()
    cpu_pool, mem_pool = f"cpu-{u}", f"mem-{u}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("physics", [
        {"name": cpu_pool, "class": "compute", "capacity": "spot", "maxCPU": 64,
         "consolidateAfter": "5s"},
        # A pool's own taints keep other pods off its nodes; the stages that name the
        # pool tolerate them (pipelinerun/jobs.placement).
        {"name": mem_pool, "class": "memory", "capacity": "on-demand", "maxCPU": 16,
         "consolidateAfter": "5s", "taints": [
             {"key": "example.org/dedicated", "value": "imaging"},
             {"key": "example.org/big-memory", "effect": "NoExecute"}]},
    ]))
    ready(kube, namespace, "physics")
    # 12 x 7 CPU = 84 > 64: the reduce stage must wait for the limit, not pass it.
    kubectl.apply(run_manifest("night", "physics", [
        stage("reduce", cpu_pool, 12, "7"),
        stage("image", mem_pool, 2, "2", "24Gi"),
    ]), namespace)

    peak = 0.0
    nodes_seen: dict[str, dict[str, str]] = {}
    busy_status: dict[str, Any] = {}
    mem_taints: list[dict[str, Any]] = []

    def finished() -> bool:
        nonlocal peak, busy_status
        peak = max(peak, claim_cpu(pool_objects(kube, "NodeClaim", namespace, "physics",
                                                cpu_pool)))
        for pool in (cpu_pool, mem_pool):
            for n in pool_objects(kube, "Node", namespace, "physics", pool):
                nodes_seen[n["metadata"]["name"]] = n["metadata"]["labels"]
                if pool == mem_pool:
                    mem_taints[:] = n["spec"].get("taints") or []
        status = (get_vc(kube, namespace, "physics") or {}).get("status") or {}
        if status.get("nodes") and status.get("hourlyUSD") and not busy_status:
            busy_status = status
        return phase(kube, namespace, "night") in TERMINAL

    wait_for("run night to finish", finished, 180, interval=0.3)
    assert phase(kube, namespace, "night") == "Succeeded"
    assert 0 < peak <= 64, f"pool {cpu_pool} held {peak} CPU (limit 64)"
    by_pool: dict[str, list[dict[str, str]]] = {cpu_pool: [], mem_pool: []}
    for labels in nodes_seen.values():
        by_pool[labels[names.LABEL_POOL]].append(labels)
    assert {(t["key"], t.get("value"), t["effect"]) for t in mem_taints} >= {
        ("example.org/dedicated", "imaging", "NoSchedule"),
        ("example.org/big-memory", None, "NoExecute")}, mem_taints
    assert by_pool[cpu_pool] and by_pool[mem_pool], nodes_seen
    for labels in by_pool[cpu_pool]:
        assert category_of(labels[KWOK_FAMILY]) in CLASS_CATEGORIES["compute"], labels
        assert labels[CAPACITY_TYPE] == "spot"
    for labels in by_pool[mem_pool]:
        assert category_of(labels[KWOK_FAMILY]) in CLASS_CATEGORIES["memory"], labels
        assert labels[CAPACITY_TYPE] == "on-demand"
    assert busy_status, "status never showed nodes with a price"
    pools = {p["name"]: p for p in busy_status["pools"]}
    assert busy_status["hourlyUSD"] == pytest.approx(
        sum(p["hourlyUSD"] for p in pools.values()), abs=1e-3)
    assert any(pools[p]["instanceTypes"] for p in (cpu_pool, mem_pool))
    # Empty nodes go after consolidateAfter (5s), and the status says so.
    wait_for("empty nodes to go", lambda: not kube.list(
        "v1", "Node", label_selector=owner(namespace, "physics")), 90)
    wait_for("status to show no nodes", lambda: ((get_vc(kube, namespace, "physics") or {})
                                                 .get("status") or {}).get("nodes") == 0, 70)


def test_spot_then_on_demand_shares_one_limit(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str]) -> None:
    u = suffix()
    pool = f"gen-{u}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("reduce", [
        {"name": pool, "class": "general", "capacity": "spot-then-on-demand", "maxCPU": 16,
         "consolidateAfter": "5s"}]))
    ready(kube, namespace, "reduce")
    nodepools = {np["metadata"]["labels"][vcnames.LABEL_CAPACITY_HALF]: np
                 for np in pool_objects(kube, "NodePool", namespace, "reduce", pool)}
    assert set(nodepools) == {"spot", "ondemand"}
    assert nodepools["spot"]["spec"]["weight"] > nodepools["ondemand"]["spec"]["weight"]
    for half, cap in (("spot", "spot"), ("ondemand", "on-demand")):
        reqs = {r["key"]: r["values"] for r in
                nodepools[half]["spec"]["template"]["spec"]["requirements"]}
        assert reqs[CAPACITY_TYPE] == [cap]
    kubectl.apply(run_manifest("r", "reduce", [stage("s", pool, 2, "3", annotations={
        "pod-complete.stage.kwok.x-k8s.io/delay": "8s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s"})]), namespace)

    def ondemand_limit_follows_spot() -> bool:
        claims = pool_objects(kube, "NodeClaim", namespace, "reduce", pool)
        spot = claim_cpu([c for c in claims if c["metadata"]["labels"].get(
            CAPACITY_TYPE) == "spot"])
        od = kube.get("karpenter.sh/v1", "NodePool", nodepools["ondemand"]["metadata"]["name"])
        limit = parse_quantity(((od or {}).get("spec") or {}).get("limits", {}).get("cpu", 0))
        return spot > 0 and limit == 16 - spot

    # Spot is tried first; what spot holds is taken off the on-demand half's limit.
    wait_for("the on-demand NodePool's limit to be 16 minus the spot CPU",
             ondemand_limit_follows_spot, 60)
    nodes = pool_objects(kube, "Node", namespace, "reduce", pool)
    assert nodes and all(n["metadata"]["labels"][CAPACITY_TYPE] == "spot" for n in nodes)
    # Generous: under CI's two workers the control plane is shared with the heaviest
    # tests; the message carries the pods and NodeClaims if it still times out.
    wait_for("run r to finish", lambda: phase(kube, namespace, "r") in TERMINAL, 180,
             explain=lambda: run_state(kube, namespace, "r", "reduce", pool))
    assert phase(kube, namespace, "r") == "Succeeded", run_state(kube, namespace, "r",
                                                                 "reduce", pool)


def test_static_mode_uses_labeled_nodes(kube: Kube, kubectl: Kubectl, namespace: str,
                                        cleanup: list[str],
                                        static_node: tuple[str, str]) -> None:
    _, pool = static_node
    missing = f"none-{suffix()}"
    create_vc(kubectl, cleanup, namespace, vc_manifest(
        "onprem", [{"name": pool, "class": "compute"}, {"name": missing, "class": "memory"}],
        provider="static"))
    not_ready = wait_for("Ready=False naming the pool without nodes", lambda: (
        c := condition(get_vc(kube, namespace, "onprem"), "Ready")).get("reason") == "NoNodes"
        and c, 30)
    assert "static mode" in not_ready["message"] and missing in not_ready["message"]
    assert pool not in not_ready["message"]
    kubectl.apply(vc_manifest("onprem", [{"name": pool, "class": "compute"}],
                              provider="static"), namespace)
    vc = ready(kube, namespace, "onprem")
    assert condition(vc, "Ready")["reason"] == "Static"
    assert "static" in condition(vc, "Ready")["message"]
    assert vc["status"]["mode"] == "static" and vc["status"]["nodes"] == 1
    assert not kube.list("karpenter.sh/v1", "NodePool", label_selector=owner(namespace,
                                                                             "onprem"))
    kubectl.apply(run_manifest("r", "onprem", [stage("s", pool, 3, "1")]), namespace)
    # Generous: under CI's two workers the control plane is shared with the heaviest
    # tests; the message carries the pods and NodeClaims if it still times out.
    wait_for("run r to finish", lambda: phase(kube, namespace, "r") in TERMINAL, 180,
             explain=lambda: run_state(kube, namespace, "r", "reduce", pool))
    assert phase(kube, namespace, "r") == "Succeeded", run_state(kube, namespace, "r",
                                                                 "reduce", pool)


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_bad_virtualclusters(kube: Kube, kubectl: Kubectl, namespace: str,
                             cleanup: list[str], case: tuple[str, dict[str, Any], str, str]
                             ) -> None:
    case_id, manifest, how, expected = case
    m = {**manifest, "metadata": {"name": f"bad-{case_id}"[:63]}, "spec": dict(manifest["spec"])}
    if how == "cel":
        r = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                    input_=yaml.safe_dump(m), check=False)
        assert r.returncode != 0 and expected in r.stderr, r.stderr
        return
    if expected.startswith("spec.nodeClass"):
        # The local cluster detects kwok; the AWS checks need the aws provider.
        m["spec"]["provider"] = "aws"
    r = kubectl.apply_as_user(m, namespace)
    if r.returncode != 0:
        # provider: aws without a role is CEL's to refuse, naming the same field.
        assert "nodeClass.role" in r.stderr and expected == "spec.nodeClass.role", r.stderr
        return
    cleanup.append(f"{namespace}/{m['metadata']['name']}")
    invalid = wait_for("the Invalid condition", lambda: condition(
        get_vc(kube, namespace, m["metadata"]["name"]), "Invalid").get("status") == "True"
        and condition(get_vc(kube, namespace, m["metadata"]["name"]), "Invalid"), 30)
    assert expected in invalid["message"], invalid["message"]
    assert not kube.list("karpenter.sh/v1", "NodePool",
                         label_selector=owner(namespace, m["metadata"]["name"]))


EXAMPLES = sorted((ROOT / "examples").glob("virtualcluster-*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("provider", ["aws", "kwok"])
def test_rendered_manifests_pass_server_dry_run(kubectl: Kubectl, namespace: str,
                                                example: Path, provider: str) -> None:
    from nightshift.aws.prices import load_kwok_catalog
    from nightshift_localcluster.paths import Layout

    vc = yaml.safe_load(example.read_text())
    vc["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()))
    spec = VirtualClusterSpec.model_validate(vc["spec"])
    catalog = load_kwok_catalog(Layout.discover().instance_types_file)
    problems = validate(spec, provider, catalog if provider == "kwok" else None)
    if problems:
        # The operator applies nothing for these; only the local example lacks AWS
        # settings (role, subnets, security groups).
        assert provider == "aws" and "local" in example.stem, problems
        return
    rendered = render_virtualcluster(vc, provider,  # type: ignore[arg-type]
                                     catalog=catalog if provider == "kwok" else None)
    kinds = {m["kind"] for m in rendered}
    assert kinds == {"NodePool", "EC2NodeClass" if provider == "aws" else "KWOKNodeClass"}
    r = kubectl("apply", "--server-side", "--dry-run=server",
                "--field-manager=nightshift-operator", "-f", "-",
                input_=yaml.safe_dump_all(rendered), check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("(server dry run)") == len(rendered), r.stdout
