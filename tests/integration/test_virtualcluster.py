"""VirtualClusters on the local cluster: Karpenter's KWOK provider really launches the
nodes the rendered NodePools ask for, and the real operator runs the show.

Pool names carry a random suffix: pipeline pods select only nightshift.io/pool, so two
tests (or two engineers) using a pool "workers" at once would share nodes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.api import names
from nightshift.kube import Kube, KubeError
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.catalog import CLASS_CATEGORIES, category_of, parse_quantity
from nightshift.virtualcluster.nodepools import render_virtualcluster
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.validate import validate
from tests.bad_virtualclusters import BAD
from tests.clusterutil import ROOT, Kubectl, wait_for
from tests.integration.conftest import Cluster, OperatorProcess
from tests.integration.prutil import wait_progressing

FAST = {"pod-complete.stage.kwok.x-k8s.io/delay": "2s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s"}
KWOK_FAMILY = "karpenter.kwok.sh/instance-family"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
TERMINAL = ("Succeeded", "Failed", "Cancelled")


def suffix() -> str:
    return uuid.uuid4().hex[:5]


def vc_manifest(name: str, pools: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.VIRTUALCLUSTER,
            "metadata": {"name": name}, "spec": {"pools": pools, **spec}}


def stage(name: str, pool: str, items: int, cpu: str, memory: str | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
    return {"name": name, "pool": pool, "forEach": {"range": {"from": 1, "to": items}},
            "image": "busybox", "steps": [{"name": "main", "command": ["true"]}],
            "resources": {"requests": requests}, "podAnnotations": annotations or FAST}


def run_manifest(name: str, vc: str, stages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": name}, "spec": {"virtualCluster": vc, "stages": stages}}


def get_vc(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    return kube.get(names.API_VERSION, names.VIRTUALCLUSTER, name, ns)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


def phase(kube: Kube, ns: str, run: str) -> str:
    obj = kube.get(names.API_VERSION, names.PIPELINERUN, run, ns) or {}
    return str((obj.get("status") or {}).get("phase", ""))


def run_state(kube: Kube, ns: str, run: str, vc: str, pool: str) -> str:
    """The run's status, its pods and the pool's NodeClaims, for a timeout's message."""
    def conds(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (obj.get("status") or {}).get("conditions") or []]

    obj = kube.get(names.API_VERSION, names.PIPELINERUN, run, ns) or {}
    lines = [f"run {run}: phase={(obj.get('status') or {}).get('phase')!r} {conds(obj)}"]
    for p in kube.list("v1", "Pod", ns, label_selector=f"{names.LABEL_RUN}={run}"):
        lines.append(f"pod {p['metadata']['name']}: {(p.get('status') or {}).get('phase')} "
                     f"on {(p.get('spec') or {}).get('nodeName')!r} {conds(p)}")
    for c in pool_objects(kube, "NodeClaim", ns, vc, pool):
        meta = c["metadata"]
        lines.append(f"nodeclaim {meta['name']} {meta.get('labels', {}).get(CAPACITY_TYPE)} "
                     f"node={(c.get('status') or {}).get('nodeName')!r} "
                     f"deleting={bool(meta.get('deletionTimestamp'))} {conds(c)}")
    return "\n".join(lines)


def owner(ns: str, vc: str) -> str:
    return f"{names.LABEL_VIRTUAL_CLUSTER}={vc},{vcnames.LABEL_VC_NAMESPACE}={ns}"


def pool_objects(kube: Kube, kind: str, ns: str, vc: str, pool: str) -> list[dict[str, Any]]:
    api = {"Node": "v1", "NodeClaim": "karpenter.sh/v1", "NodePool": "karpenter.sh/v1"}[kind]
    return kube.list(api, kind, label_selector=f"{owner(ns, vc)},{names.LABEL_POOL}={pool}")


def claim_cpu(claims: list[dict[str, Any]]) -> float:
    """CPU as Karpenter counts it against a NodePool's limit: each NodeClaim's capacity."""
    return sum(parse_quantity(((c.get("status") or {}).get("capacity") or {}).get("cpu", 0))
               for c in claims)


@pytest.fixture
def cleanup(kube: Kube, operator: OperatorProcess) -> Iterator[list[str]]:
    """VirtualClusters to force-delete after the test, so no NodePool outlives it and
    the operator (session-scoped) is still there to remove the finalizer."""
    made: list[str] = []  # "namespace/name"
    yield made
    force = {"metadata": {"annotations": {names.ANNOTATION_FORCE_DELETE: "true"}}}
    for ref in made:
        ns, name = ref.split("/")
        try:
            kube.merge_patch(names.API_VERSION, names.VIRTUALCLUSTER, name, ns, force)
        except KubeError as e:
            if e.status != 404:  # already gone is fine
                raise
        kube.delete(names.API_VERSION, names.VIRTUALCLUSTER, name, ns)
    for ref in made:
        ns, name = ref.split("/")
        wait_for(f"VirtualCluster {ref} to be gone",
                 lambda ns=ns, name=name: get_vc(kube, ns, name) is None,  # type: ignore[misc]
                 90)


def create_vc(kubectl: Kubectl, cleanup: list[str], ns: str, manifest: dict[str, Any]) -> None:
    kubectl.apply(manifest, ns)
    cleanup.append(f"{ns}/{manifest['metadata']['name']}")


def ready(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    vc = wait_for(f"{ns}/{name} Ready", lambda: (v := get_vc(kube, ns, name)) and condition(
        v, "Ready").get("status") == "True" and v, 30)
    return dict(vc)


def test_pools_launch_right_nodes_within_limits_and_run_completes(
        kube: Kube, kubectl: Kubectl, namespace: str, cleanup: list[str]) -> None:
    u = suffix()
    cpu_pool, mem_pool = f"cpu-{u}", f"mem-{u}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("physics", [
        {"name": cpu_pool, "class": "compute", "capacity": "spot", "maxCPU": 64,
         "consolidateAfter": "5s"},
        {"name": mem_pool, "class": "memory", "capacity": "on-demand", "maxCPU": 16,
         "consolidateAfter": "5s"},
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

    def finished() -> bool:
        nonlocal peak, busy_status
        peak = max(peak, claim_cpu(pool_objects(kube, "NodeClaim", namespace, "physics",
                                                cpu_pool)))
        for pool in (cpu_pool, mem_pool):
            for n in pool_objects(kube, "Node", namespace, "physics", pool):
                nodes_seen[n["metadata"]["name"]] = n["metadata"]["labels"]
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


@pytest.fixture
def static_node(kubectl: Kubectl) -> Iterator[tuple[str, str]]:
    """A KWOK node labeled and tainted by hand, as a kind or on-prem admin would."""
    u = suffix()
    node, pool = f"static-{u}", f"hand-{u}"
    kubectl.apply({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {names.LABEL_POOL: pool, "kubernetes.io/os": "linux",
                                "kubernetes.io/hostname": node, "type": "kwok"}},
        "spec": {"taints": [{"key": names.TAINT_POOL, "value": pool,
                             "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    })
    yield node, pool
    kubectl("delete", "node", node, "--wait=false", check=False)


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


def test_deletion_waits_for_running_runs(kube: Kube, kubectl: Kubectl, namespace: str,
                                         cleanup: list[str]) -> None:
    u = suffix()
    pool = f"cpu-{u}"
    create_vc(kubectl, cleanup, namespace, vc_manifest("doomed", [
        {"name": pool, "class": "compute", "maxCPU": 8, "consolidateAfter": "5s"}]))
    ready(kube, namespace, "doomed")
    kubectl.apply(run_manifest("long", "doomed", [stage("s", pool, 1, "1", annotations={
        "pod-complete.stage.kwok.x-k8s.io/delay": "10s",
        "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s"})]), namespace)
    wait_for("a node under the run", lambda: pool_objects(kube, "Node", namespace, "doomed",
                                                          pool), 60)
    kubectl("delete", "-n", namespace, "virtualcluster", "doomed", "--wait=false")
    kept = wait_for("the Deleting condition naming the run", lambda: (
        c := condition(get_vc(kube, namespace, "doomed"), "Deleting")).get("reason") == "InUse"
        and c, 30)
    assert "long" in kept["message"] and "nightshift.io/force-delete" in kept["message"]
    assert phase(kube, namespace, "long") not in TERMINAL
    assert pool_objects(kube, "NodePool", namespace, "doomed", pool)
    wait_for("run long to finish", lambda: phase(kube, namespace, "long") in TERMINAL, 90)
    assert phase(kube, namespace, "long") == "Succeeded"
    wait_for("VirtualCluster doomed to be gone", lambda: get_vc(kube, namespace, "doomed")
             is None, 90)
    sel = owner(namespace, "doomed")
    assert not kube.list("karpenter.sh/v1", "NodePool", label_selector=sel)
    assert not kube.list("karpenter.kwok.sh/v1alpha1", "KWOKNodeClass", label_selector=sel)
    assert not kube.list("v1", "Node", label_selector=sel)


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
    assert "retries every" in cond["message"]
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
    wait_for("run early to finish", lambda: phase(kube, namespace, "early") in TERMINAL, 120)
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

    wait_for("run tiny to finish", finished, 180, interval=0.5)
    assert phase(kube, namespace, "tiny") == "Succeeded"
    assert nodes
    for labels in nodes.values():
        assert int(labels["karpenter.kwok.sh/instance-cpu"]) >= 8, labels
        assert category_of(labels[KWOK_FAMILY]) in CLASS_CATEGORIES["compute"], labels
