"""A bench bed on another release: NIGHTSHIFT_<KEY> overrides a pin of
hack/versions.env, the same way for the build script and for the local cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nightshift_localcluster.paths import Layout, read_versions, repo_root

ROOT = repo_root(Path(__file__))


def test_the_pins_are_read_as_written_without_an_override() -> None:
    versions = read_versions(ROOT, environ={})
    assert versions["KUBERNETES_VERSION"].startswith("v1.")
    assert versions["KUBERNETES_STAGING_VERSION"].startswith("v0.")


def test_a_prefixed_variable_overrides_one_pin_and_a_bare_one_does_not(tmp_path: Path) -> None:
    pinned = read_versions(ROOT, environ={})
    env = {"NIGHTSHIFT_KUBERNETES_VERSION": "v1.99.0", "ETCD_VERSION": "v0.0.1"}
    versions = read_versions(ROOT, environ=env)
    assert versions["KUBERNETES_VERSION"] == "v1.99.0"
    assert versions["ETCD_VERSION"] == pinned["ETCD_VERSION"]
    lay = Layout(root=ROOT, state=tmp_path, cache=tmp_path, versions=versions)
    assert lay.bin("kubernetes", "kubelet") == tmp_path / "bin" / "kubernetes-v1.99.0" / "kubelet"


def test_the_build_script_reads_the_same_pins_and_overrides() -> None:
    """hack/versions.sh, sourced by hack/build-upstream.sh, agrees with read_versions."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTSHIFT_")}
    env.update(NIGHTSHIFT_KUBERNETES_VERSION="v1.99.0", ETCD_VERSION="v0.0.1")
    script = '. hack/versions.sh; echo "$KUBERNETES_VERSION $ETCD_VERSION $KWOK_VERSION"'
    out = subprocess.run(["bash", "-euc", script], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    want = read_versions(ROOT, environ=env)
    assert out == ["v1.99.0", want["ETCD_VERSION"], want["KWOK_VERSION"]]
