"""The operator as users install it: `helm install charts/nightshift` with the image
`make images` built, one pod on the local cluster's real node, under the chart's own
ServiceAccount and RBAC (no cluster-admin anywhere).

The tests run in file order on one release (module fixture), each leaving it as the
next expects:
1. the pod is Ready on the real node, as the chart's ServiceAccount, with peering on;
2. a PipelineRun and a VirtualCluster succeed, using the calls of their rows in
   operator/src/nightshift/kubecalls.py (items from a ConfigMap, a failed item's pods
   listed for its exit code, events, NodePools and KWOK node classes applied and pruned,
   the VirtualCluster's finalizer), and the operator's log says "forbidden" nowhere: a
   rule they need missing from the chart fails here;
3. /metrics, scraped from the host at the pod's IP (the Service selects the pod);
4. a live peer of higher priority pauses the operator: its engine loops stop too;
5. `helm upgrade` with a values change rolls the operator while a run continues;
6. `replicas: 2`: the standby never reconciles; the active pod deleted mid-run, the
   standby finishes the run, every item counted once;
7. `helm uninstall`: the release's objects go; CRDs, runs and their Jobs stay.

Skipped, with the reason, when the cluster has no Ready real node or its containerd
lacks nightshift-operator:dev (`make images`). NIGHTSHIFT_TEST_CHART=<dir> installs
another copy of the chart instead (a copy with an RBAC rule removed must fail test 2;
docs/install.md says how that was tried).
"""

from __future__ import annotations

import datetime
import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.virtualcluster.objectnames import LABEL_VC_NAMESPACE
from nightshift_localcluster import helminstall
from nightshift_localcluster.nodeconfig import NODE_NAME
from tests.clusterutil import ROOT, Kubectl, wait_for
from tests.integration.conftest import SESSION, Cluster, external_instance_catalog
from tests.integration.installutil import assert_nothing_forbidden, rbac_workload
from tests.integration.prutil import (
    get_run,
    jobs,
    kwok_node_pool,
    pipelinerun,
    stage,
    stage_status,
    wait_phase,
)
from tests.unit.test_chart_lint import helm_bin

RELEASE = f"nightshift-h{SESSION}"
PEERING = "nightshift"
METRICS_PORT = 8080
# Not t-<session>-*: the suite's host-process operator watches those namespaces.
OP_NS, RUNS_NS = f"h-{SESSION}-op", f"h-{SESSION}-runs"


@dataclass
class Release:
    kubectl: Kubectl
    kube: Kube
    kubeconfig: str
    chart: Path
    pool: str

    def helm(self, *args: str, values: dict[str, Any] | None = None) -> str:
        r = helminstall.helm(helm_bin(), self.kubeconfig, *args, values=values)
        assert r.returncode == 0, f"helm {' '.join(args)}: {r.stderr}"
        return r.stdout

    def upgrade(self, values: dict[str, Any]) -> None:
        r = helminstall.upgrade_install(helm_bin(), self.kubeconfig, self.chart, RELEASE,
                                        OP_NS, values, reuse_values=True)
        assert r.returncode == 0, f"helm upgrade: {r.stderr}\n{self.logs()}"

    def pods(self) -> list[dict[str, Any]]:
        sel = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
        return [p for p in self.kube.list("v1", "Pod", OP_NS, label_selector=sel)
                if not p["metadata"].get("deletionTimestamp")]

    def ready_pods(self, n: int) -> list[dict[str, Any]]:
        def ready() -> list[dict[str, Any]] | None:
            pods = [p for p in self.pods() if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or [])]
            return pods if len(pods) == n and len(self.pods()) == n else None
        found: list[dict[str, Any]] = wait_for(f"{n} Ready operator pod(s)", ready, 180, 1)
        return found

    def logs(self, pod: str | None = None) -> str:
        target = f"pod/{pod}" if pod else f"deploy/{RELEASE}"
        r = self.kubectl("logs", target, "-n", OP_NS, "--tail=-1", check=False)
        return r.stdout + r.stderr

    def peers(self) -> dict[str, int]:
        """Live keep-alives in the peering object: identity (pod name) -> priority."""
        obj = self.kube.get("kopf.dev/v1", "KopfPeering", PEERING, RUNS_NS) or {}
        now = datetime.datetime.now(datetime.UTC)
        out = {}
        for ident, info in (obj.get("status") or {}).items():
            seen = datetime.datetime.fromisoformat(info["lastseen"])
            if seen + datetime.timedelta(seconds=int(info["lifetime"])) > now:
                out[ident] = int(info["priority"])
        return out


def scrape(pod: dict[str, Any]) -> dict[tuple[str, str], float]:
    """The pod's /metrics from the host (the real node's pod network is routed here):
    (sample name, kind label) -> value."""
    url = f"http://{pod['status']['podIP']}:{METRICS_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, s.labels.get("kind", "")): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def passes(pod: dict[str, Any]) -> float:
    return scrape(pod).get(("nightshift_passes_total", names.PIPELINERUN), 0.0)


@pytest.fixture(scope="module")
def release(cluster: Cluster, kubectl: Kubectl, kube: Kube,
            request: pytest.FixtureRequest) -> Iterator[Release]:
    problem = helminstall.real_node_problem(
        helminstall.real_node([kubectl.bin, f"--kubeconfig={cluster.kubeconfig}"]))
    if problem:
        pytest.skip(f"the Helm-installed operator needs the real node: {problem}")
    # The repository's CRDs, current (Helm installs crds/ only where they are missing).
    request.getfixturevalue("crds")
    chart = Path(os.environ.get("NIGHTSHIFT_TEST_CHART") or ROOT / "charts" / "nightshift")
    pool = f"p-{RUNS_NS}"
    kubectl("create", "namespace", RUNS_NS)
    kubectl.apply(kwok_node_pool(pool))
    catalog = external_instance_catalog() if not cluster.local else cluster.instance_catalog
    values = helminstall.local_values(
        watch_namespaces=[RUNS_NS], catalog=Path(catalog) if catalog else None,
        # Resync every 5 s: a paused operator whose loops kept running would show it.
        extra={"config": {"progressInterval": 1, "resync": 5}})
    rel = Release(kubectl, kube, cluster.kubeconfig, chart, pool)
    try:
        r = helminstall.upgrade_install(helm_bin(), cluster.kubeconfig, chart, RELEASE, OP_NS,
                                        values)
        assert r.returncode == 0, f"helm install: {r.stderr}\n{rel.logs()}"
        yield rel
    finally:
        helminstall.helm(helm_bin(), cluster.kubeconfig, "uninstall", RELEASE, "-n", OP_NS,
                         "--wait")
        for vc in kube.list(names.API_VERSION, names.VIRTUALCLUSTER, RUNS_NS):
            # Without the operator nothing removes the finalizer (docs/install.md).
            kube.merge_patch(names.API_VERSION, names.VIRTUALCLUSTER, vc["metadata"]["name"],
                             RUNS_NS, {"metadata": {"finalizers": None}})
        kubectl("delete", "nodepools", "-l", f"{LABEL_VC_NAMESPACE}={RUNS_NS}",
                "--wait=false", check=False)
        kubectl("delete", "namespace", RUNS_NS, OP_NS, "--wait=false", check=False)
        kubectl("delete", "node", f"kwok-{pool}", "--wait=false", check=False)


def slow_stage(name: str, pool: str, n: int, parallelism: int, **kw: Any) -> dict[str, Any]:
    timing = {"pod-complete.stage.kwok.x-k8s.io/delay": "3s",
              "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "4s"}
    return stage(name, pool, n, parallelism=parallelism, retries={"perItem": 0},
                 podAnnotations=timing, **kw)


def two_stage_run(rel: Release, name: str, n: int, parallelism: int = 4) -> None:
    # Stage a's pods take about 10 s each here: 48 items at parallelism 8 ran 63 s, the
    # rollout or failover was over 15 s in, so the new operator had most of the run.
    rel.kubectl.apply(pipelinerun(name, RUNS_NS, [
        slow_stage("a", rel.pool, n, parallelism=parallelism),
        slow_stage("b", rel.pool, 6, parallelism=6, dependsOn=["a"])]))


def under_way(rel: Release, name: str, done: int = 4) -> None:
    """Wait until `done` items of the run's stage a succeeded."""
    def check() -> bool:
        stages = (get_run(rel.kube, RUNS_NS, name).get("status") or {}).get("stages") or []
        return any(st["name"] == "a" and st.get("succeeded", 0) >= done for st in stages)
    wait_for(f"run {name} under way ({done} items of stage a)", check, 90, 1)


def assert_counted_once(rel: Release, name: str, n: int) -> None:
    """Succeeded, every item once: one Job per stage, one succeeded pod per index."""
    run = wait_phase(rel.kube, RUNS_NS, name, {"Succeeded", "Failed", "Cancelled"}, 300)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    for st_name, total in (("a", n), ("b", 6)):
        st = stage_status(run, st_name)
        assert (st["succeeded"], st["failed"], st["total"]) == (total, 0, total), st
    assert run["status"]["progress"] == f"{n + 6}/{n + 6}"
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for j in jobs(rel.kube, RUNS_NS, name):
        by_stage.setdefault(j["metadata"]["labels"][names.LABEL_STAGE], []).append(j)
    assert {s: len(js) for s, js in by_stage.items()} == {"a": 1, "b": 1}
    pods = rel.kube.list("v1", "Pod", RUNS_NS, label_selector=f"{names.LABEL_RUN}={name}",
                         field_selector="status.phase=Succeeded")
    indexes = [(p["metadata"]["labels"][names.LABEL_STAGE],
                p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
               for p in pods]
    assert len(indexes) == len(set(indexes)) == n + 6, sorted(indexes)


def test_operator_pod_runs_on_the_real_node_as_its_service_account(release: Release) -> None:
    (pod,) = release.ready_pods(1)
    spec = pod["spec"]
    assert spec["nodeName"] == NODE_NAME
    assert spec["serviceAccountName"] == RELEASE
    assert pod["status"]["containerStatuses"][0]["image"].endswith(
        f"{helminstall.OPERATOR_REPOSITORY}:{helminstall.TAG}")
    assert spec["securityContext"]["runAsNonRoot"] is True
    wait_for("the pod's keep-alive in the peering object",
             lambda: pod["metadata"]["name"] in release.peers(), 60)
    assert f"peering {PEERING!r} as {pod['metadata']['name']}" in release.logs()


def test_runs_and_virtualclusters_work_under_the_chart_rbac(release: Release) -> None:
    rbac_workload(release.kube, release.kubectl, RUNS_NS, release.pool)
    assert_nothing_forbidden(release.logs())


def test_metrics_scraped_from_the_operator_pod(release: Release) -> None:
    (pod,) = release.ready_pods(1)
    metrics = scrape(pod)
    assert metrics[("nightshift_passes_total", names.PIPELINERUN)] > 0
    assert metrics[("nightshift_passes_total", names.VIRTUALCLUSTER)] > 0
    ep = release.kube.get("v1", "Endpoints", f"{RELEASE}-metrics", OP_NS) or {}
    ips = {a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or []}
    assert pod["status"]["podIP"] in ips, ep


def test_a_paused_operator_stops_its_engine_loops(release: Release) -> None:
    rel = release
    (pod,) = rel.ready_pods(1)
    two_stage_run(rel, "paused", 12)
    under_way(rel, "paused", 1)
    # An older replica kopf had presumed dead comes back: priority 0 beats every real
    # (negative) one, so kopf pauses this operator.
    now = datetime.datetime.now(datetime.UTC).isoformat()
    rel.kube.merge_patch("kopf.dev/v1", "KopfPeering", PEERING, RUNS_NS, {"status": {
        "returning-elder": {"priority": 0, "lifetime": 60, "lastseen": now}}})
    try:
        wait_for("the engine's loops stopped", lambda: scrape(pod).get(
            ("nightshift_loops", names.PIPELINERUN)) == 0, 20, 1)
        frozen, status = passes(pod), get_run(rel.kube, RUNS_NS, "paused")["status"]
        time.sleep(15)  # three resync intervals
        assert passes(pod) == frozen, "a paused operator ran reconcile passes"
        after = get_run(rel.kube, RUNS_NS, "paused")
        assert after["status"] == status
    finally:
        rel.kube.merge_patch("kopf.dev/v1", "KopfPeering", PEERING, RUNS_NS,
                             {"status": {"returning-elder": None}})
    assert_counted_once(rel, "paused", 12)
    assert "Pausing operations in favour of" in rel.logs()


def test_helm_upgrade_rolls_the_operator_while_a_run_continues(release: Release) -> None:
    rel = release
    (old,) = rel.ready_pods(1)
    two_stage_run(rel, "upgraded", 48, parallelism=8)
    under_way(rel, "upgraded")
    rel.upgrade({"config": {"progressInterval": 2}})
    (new,) = rel.ready_pods(1)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    env = {e["name"]: e.get("value") for e in new["spec"]["containers"][0]["env"]}
    assert env["NIGHTSHIFT_PROGRESS_INTERVAL"] == "2"
    mid = get_run(rel.kube, RUNS_NS, "upgraded")
    assert mid["status"]["phase"] == "Running", (
        "the run ended before the new operator took over; lengthen stage a")
    assert_counted_once(rel, "upgraded", 48)
    assert passes(new) > 0


def test_failover_the_standby_finishes_the_run(release: Release) -> None:
    rel = release
    rel.upgrade({"replicas": 2})
    pods = {p["metadata"]["name"]: p for p in rel.ready_pods(2)}
    peers = wait_for("both replicas' keep-alives", lambda: (
        p := rel.peers()) and set(pods) <= set(p) and p, 60, 1)
    active = max(pods, key=lambda n: peers[n])
    (standby,) = set(pods) - {active}
    two_stage_run(rel, "failover", 40, parallelism=8)
    under_way(rel, "failover")
    # Peering at work: the standby has not run a single pass.
    assert passes(pods[standby]) == 0, rel.logs(standby)
    assert passes(pods[active]) > 0
    rel.kubectl("delete", "pod", active, "-n", OP_NS, "--wait=false")
    wait_for("the standby reconciling", lambda: passes(pods[standby]) > 0, 90, 1)
    mid = get_run(rel.kube, RUNS_NS, "failover")
    assert mid["status"]["phase"] == "Running", (
        "the run ended before the failover; lengthen stage a")
    assert_counted_once(rel, "failover", 40)
    # The replacement pod is younger: it waits.
    replacement = [p for p in rel.ready_pods(2) if p["metadata"]["name"] not in pods]
    assert replacement and passes(replacement[0]) == 0


def test_helm_uninstall_leaves_crds_and_runs(release: Release) -> None:
    rel = release
    manifest = [d for d in yaml.safe_load_all(
        rel.helm("get", "manifest", RELEASE, "-n", OP_NS)) if d]
    kept_jobs = jobs(rel.kube, RUNS_NS, "failover")
    rel.helm("uninstall", RELEASE, "-n", OP_NS, "--wait")
    for obj in manifest:
        meta = obj["metadata"]
        # -n is ignored for cluster-scoped kinds; namespaced ones default to the release's.
        r = rel.kubectl("get", f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}"
                        if "/" in obj["apiVersion"] else obj["kind"], meta["name"],
                        "-n", meta.get("namespace") or OP_NS, check=False)
        assert r.returncode != 0 and "NotFound" in r.stderr, (
            f"{obj['kind']} {meta['name']} stayed: {r.stdout}{r.stderr}")
    assert len(manifest) >= 8, [o["kind"] for o in manifest]
    for crd in ("pipelineruns.nightshift.io", "virtualclusters.nightshift.io",
                "sharedstorages.nightshift.io", "kopfpeerings.kopf.dev",
                "clusterkopfpeerings.kopf.dev"):
        rel.kubectl("get", "crd", crd)
    for run in ("rbac", "paused", "upgraded", "failover"):
        assert rel.kube.get(names.API_VERSION, names.PIPELINERUN, run, RUNS_NS) is not None
    assert [j["metadata"]["name"] for j in jobs(rel.kube, RUNS_NS, "failover")] == [
        j["metadata"]["name"] for j in kept_jobs]
