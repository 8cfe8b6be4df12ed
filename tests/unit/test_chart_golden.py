"""Golden `helm template` outputs of both charts (tests/golden/charts/; UPDATE_GOLDEN=1
rewrites), and the chart's CRDs being the repository's crds/ (one source)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.golden_util import check_golden
from tests.unit.test_chart_lint import COLLABORATION, NIGHTSHIFT, ROOT, helm, render

NIGHTSHIFT_CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    # Everything optional on: listed namespaces, two replicas, AWS identities, monitoring.
    "everything": {
        "watchNamespaces": ["astro", "radio"], "replicas": 2, "rbac.readSecrets": True,
        "image.repository": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/nightshift-operator",
        "image.tag": "1.2.3", "runnerImage.tag": "1.2.3", "aws.region": "eu-west-1",
        "serviceAccount.irsaRoleArn": "arn:aws:iam::123456789012:role/nightshift",
        "podIdentity.roleArn": "arn:aws:iam::123456789012:role/nightshift",
        "podIdentity.clusterName": "science", "podIdentity.ackAssociation.enabled": True,
        "config.instanceCatalogVolume": {"hostPath": {
            "path": "/var/lib/nightshift/catalog", "type": "Directory"}},
        "config.s3Endpoints": ["https://s3.example.org", "http://minio.storage:*"],
        "config.s3OperatorIdentity": True,
        "config.clusterCIDRs": ["10.0.0.0/16", "100.64.0.0/16"],
        "config.runnerImages": ["123456789012.dkr.ecr.eu-west-1.amazonaws.com/runner:1.2.4"],
        "metrics.serviceMonitor.enabled": True,
        "metrics.serviceMonitor.labels": {"release": "prometheus"},
        "networkPolicy.enabled": True,
        "networkPolicy.metricsFrom": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "monitoring"}}}],
        "dashboards.enabled": True, "dashboards.namespace": "monitoring",
        "extraEnv": [{"name": "AWS_STS_REGIONAL_ENDPOINTS", "value": "regional"}],
        "priorityClassName": "nightshift-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
    },
    # No peering: one replica, recreated rather than rolled.
    "standalone": {"peering.enabled": False, "rbac.runnerNodeReader": False,
                   "podDisruptionBudget.enabled": False, "metrics.service.enabled": False},
}

COLLABORATION_CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything": {
        "namespace.create": True, "namespace.name": "astro",
        "namespace.labels": {"pod-security.kubernetes.io/enforce": "baseline"},
        "virtualCluster.name": "astro",
        "virtualCluster.spec": {
            "provider": "aws",
            "pools": [{"name": "cpu", "class": "compute", "capacity": "spot-then-on-demand",
                       "maxCPU": 4000},
                      {"name": "mpi", "class": "cluster-compute", "placement": "cluster",
                       "maxNodes": 16}],
            "nodeClass": {"role": "KarpenterNodeRole-science",
                          "subnetSelectorTerms": [{"tags": {
                              "karpenter.sh/discovery": "science"}}]}},
        "sharedStorages": [{"name": "software", "spec": {"cvmfs": {
            "repositories": ["sft.cern.ch"]}}}],
        "pipelines.serviceAccount.irsaRoleArn": "arn:aws:iam::123456789012:role/astro-s3",
        "operator.secretNames": ["minio-credentials"],
        "people.editors.groups": ["astro-pipelines"],
        "people.editors.users": ["alice@example.org"],
        "people.viewers.groups": ["astro"],
    },
    # Only the VirtualCluster: quota, limits and the pipelines' identity managed elsewhere.
    "minimal": {"resourceQuota.enabled": False, "limitRange.enabled": False,
                "pipelines.serviceAccount.create": False,
                "pipelines.nodeReaderClusterRole": ""},
}


@pytest.mark.parametrize("case", sorted(NIGHTSHIFT_CASES))
def test_nightshift_golden(case: str) -> None:
    check_golden(f"charts/nightshift/{case}.yaml", render(NIGHTSHIFT, NIGHTSHIFT_CASES[case]))


@pytest.mark.parametrize("case", sorted(COLLABORATION_CASES))
def test_collaboration_golden(case: str) -> None:
    check_golden(f"charts/collaboration/{case}.yaml",
                 render(COLLABORATION, COLLABORATION_CASES[case], release="astro",
                        namespace="astro"))


def test_chart_crds_are_the_repositorys() -> None:
    """charts/nightshift/crds/ links every file of crds/ (one source, not a copy); its
    only own file is kopf's peering CRDs."""
    repo = sorted((ROOT / "crds").glob("*.yaml"))
    chart = NIGHTSHIFT / "crds"
    for crd in repo:
        link = chart / crd.name
        assert link.is_symlink(), f"{link} must be a symlink to {crd} (ln -s " \
            f"../../../crds/{crd.name} {link})"
        assert link.resolve() == crd.resolve(), f"{link} points at {link.resolve()}"
    own = {p.name for p in chart.iterdir() if not p.is_symlink()}
    assert own == {"kopfpeering.yaml"}, f"unexpected files in {chart}: {own}"
    # And helm installs them: the rendered CRDs are the files' contents.
    out = helm("template", "x", str(NIGHTSHIFT), "--include-crds").stdout
    crds = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out)
            if d and d["kind"] == "CustomResourceDefinition"}
    for crd in repo:
        doc = yaml.safe_load(crd.read_text())
        assert crds[doc["metadata"]["name"]] == doc
    assert {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"} <= set(crds)


def test_operator_pod_is_locked_down() -> None:
    deploy = next(o for o in render(NIGHTSHIFT) if o["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["requests"] and c["resources"]["limits"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert f"--health-port={ports['health']}" in c["args"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NIGHTSHIFT_METRICS_PORT"] == str(ports["metrics"]) == "8080"
    assert env["NIGHTSHIFT_PEERING"] == "nightshift"


def test_config_env_names_are_what_the_operator_reads() -> None:
    """The NIGHTSHIFT_* variables the chart sets are those config.py reads, all of them."""
    src = (ROOT / "operator/src/nightshift/config.py").read_text()
    read = set(re.findall(r'"(NIGHTSHIFT_[A-Z0-9_]+)"', src))
    deploy = next(o for o in render(NIGHTSHIFT, NIGHTSHIFT_CASES["everything"])
                  if o["kind"] == "Deployment")
    env = {e["name"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    # NIGHTSHIFT_PEERING is for cli/operator.py once peering is wired (chart README).
    chart = {n for n in env if n.startswith("NIGHTSHIFT_")} - {"NIGHTSHIFT_PEERING"}
    assert not chart - read, f"the chart sets {chart - read} but config.py never reads them"
    assert not read - chart, f"config.py reads {read - chart}; add values for them"


def _golden_dir() -> Path:
    return ROOT / "tests" / "golden" / "charts"


def test_no_stale_goldens() -> None:
    cases = {f"nightshift/{c}.yaml" for c in NIGHTSHIFT_CASES} | {
        f"collaboration/{c}.yaml" for c in COLLABORATION_CASES}
    present = {str(p.relative_to(_golden_dir())) for p in _golden_dir().rglob("*.yaml")}
    assert present <= cases, f"golden files no case renders: {sorted(present - cases)}"
