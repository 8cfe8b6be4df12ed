"""The chart's RBAC against the real API server, without the operator image: `helm
install charts/nightshift` with no replicas, then the operator as a host process that
authenticates with a token of the chart's ServiceAccount, so every call it makes is
authorized exactly as in its pod. A PipelineRun and a VirtualCluster that need their
kubecalls rows must work, with peering on (the peering object's RBAC too), and the log
must say "forbidden" nowhere: a rule missing from the chart fails this test.

KWOK only: runs wherever `make test` runs (test_install.py checks the same in the
operator's pod when the real node has the image). NIGHTSHIFT_TEST_CHART=<dir> installs
another copy of the chart (how a removed rule was shown to fail: docs/install.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.virtualcluster.objectnames import LABEL_VC_NAMESPACE
from nightshift_localcluster import helminstall
from tests.clusterutil import ROOT, Kubectl, wait_for
from tests.integration.conftest import SESSION, Cluster, OperatorProcess
from tests.integration.installutil import (
    assert_nothing_forbidden,
    rbac_workload,
    service_account_kubeconfig,
)
from tests.integration.prutil import kwok_node_pool
from tests.unit.test_chart_lint import helm_bin

RELEASE = f"nightshift-r{SESSION}"
OP_NS, RUNS_NS = f"r-{SESSION}-op", f"r-{SESSION}-runs"


@pytest.fixture(scope="module")
def chart_operator(cluster: Cluster, kubectl: Kubectl, kube: Kube, crds: list[str],
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    chart = Path(os.environ.get("NIGHTSHIFT_TEST_CHART") or ROOT / "charts" / "nightshift")
    pool = f"p-{RUNS_NS}"
    kubectl("create", "namespace", RUNS_NS)
    kubectl.apply(kwok_node_pool(pool))
    values = helminstall.local_values(watch_namespaces=[RUNS_NS], replicas=0)
    op: OperatorProcess | None = None
    try:
        r = helminstall.upgrade_install(helm_bin(), cluster.kubeconfig, chart, RELEASE, OP_NS,
                                        values)
        assert r.returncode == 0, f"helm install: {r.stderr}"
        tmp = tmp_path_factory.mktemp("rbac-live")
        env = {"KUBECONFIG": service_account_kubeconfig(kubectl, RELEASE, OP_NS,
                                                        tmp / "sa.kubeconfig"),
               "NIGHTSHIFT_PEERING": "nightshift", "POD_ID": f"{RELEASE}-host"}
        op = OperatorProcess(cluster, tmp / "operator.log", env, namespace=RUNS_NS)
        op.start()
        yield op
    finally:
        if op is not None:
            op.stop()
        helminstall.helm(helm_bin(), cluster.kubeconfig, "uninstall", RELEASE, "-n", OP_NS,
                         "--wait")
        for vc in kube.list(names.API_VERSION, names.VIRTUALCLUSTER, RUNS_NS):
            kube.merge_patch(names.API_VERSION, names.VIRTUALCLUSTER, vc["metadata"]["name"],
                             RUNS_NS, {"metadata": {"finalizers": None}})
        kubectl("delete", "nodepools", "-l", f"{LABEL_VC_NAMESPACE}={RUNS_NS}",
                "--wait=false", check=False)
        kubectl("delete", "namespace", RUNS_NS, OP_NS, "--wait=false", check=False)
        kubectl("delete", "node", f"kwok-{pool}", "--wait=false", check=False)


def test_the_operator_needs_nothing_the_chart_does_not_grant(
        chart_operator: OperatorProcess, kube: Kube, kubectl: Kubectl) -> None:
    whoami = Kubectl(chart_operator.env["KUBECONFIG"])(
        "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    assert whoami == f"system:serviceaccount:{OP_NS}:{RELEASE}"
    # Peering works with the chart's grants: the keep-alive lands in the peering object.
    wait_for("the operator's keep-alive", lambda: chart_operator.env["POD_ID"] in (
        (kube.get("kopf.dev/v1", "KopfPeering", "nightshift", RUNS_NS) or {}).get("status")
        or {}), 60, 1)
    try:
        rbac_workload(kube, kubectl, RUNS_NS, f"p-{RUNS_NS}")
    finally:
        print(chart_operator.tail(60))
    assert_nothing_forbidden(chart_operator.log.read_text(errors="replace"))
