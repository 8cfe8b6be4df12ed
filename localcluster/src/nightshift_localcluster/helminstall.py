"""The operator chart (charts/nightshift) on the local cluster, for `make demo` and
tests/integration/test_install.py.

The operator runs as users run it: a pod from the image `make images` built
(`nightshift-operator:dev`, in the real node's containerd, never pulled), under the
chart's ServiceAccount and RBAC. Only the real node runs real containers, so the pod is
pinned to it (its label and toleration); the KWOK provider's instance catalog reaches
the pod through a hostPath (the real node is this machine), as docs/install.md says.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nightshift_localcluster import nodeconfig
from nightshift_localcluster.nodeconfig import NODE_LABEL, NODE_NAME, NODE_TAINT

OPERATOR_REPOSITORY = "nightshift-operator"
RUNNER_REPOSITORY = "nightshift-runner"
TAG = "dev"


def image_ref(image: str) -> str:
    """How containerd names an image hack/images.sh imported as "<name>:<tag>"."""
    return f"docker.io/library/{image}"


OPERATOR_IMAGE_REF = image_ref(f"{OPERATOR_REPOSITORY}:{TAG}")


def real_node_problem(node: dict[str, Any] | None, image: str | None = None) -> str | None:
    """Why a pod of `image` (the operator's by default) cannot run on this cluster's real
    node (`node` is its Node object, None when there is none); None when it can."""
    if node is None:
        return (f"the cluster has no real node {NODE_NAME} (the local cluster starts one "
                "when run as root on Linux: `make cluster-up`)")
    ready = [c for c in (node.get("status") or {}).get("conditions") or []
             if c.get("type") == "Ready"]
    if not ready or ready[0].get("status") != "True":
        return f"the real node {NODE_NAME} is not Ready"
    if image is not None:
        return missing_image(node, image)
    missing = missing_image(node, f"{OPERATOR_REPOSITORY}:{TAG}")
    return f"{missing} (or `bash hack/images.sh build .` for the operator only)" \
        if missing else None


def missing_image(node: dict[str, Any], image: str) -> str | None:
    """Why a pod of `image` ("<name>:<tag>", as hack/images.sh imports it) cannot start
    on the real node `node` without a pull; None when the Node lists the image."""
    have = {n for img in (node.get("status") or {}).get("images") or []
            for n in img.get("names") or []}
    if image_ref(image) in have:
        return None
    return f"{image} is not in the real node's containerd: run `make images`"


def real_node(kubectl: Sequence[str]) -> dict[str, Any] | None:
    """The real node's Node object through `kubectl` (a command line with its
    kubeconfig), None when the cluster has none."""
    r = subprocess.run([*kubectl, "get", "node", NODE_NAME, "-o", "json"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return None
    node: dict[str, Any] = json.loads(r.stdout)
    return node


def local_values(*, watch_namespaces: Sequence[str], catalog: Path | None = None,
                 replicas: int = 1, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Chart values for the local cluster: the :dev images, never pulled, the pod on the
    real node, the KWOK instance catalog by hostPath."""
    values: dict[str, Any] = {
        "image": {"repository": OPERATOR_REPOSITORY, "tag": TAG, "pullPolicy": "Never"},
        "runnerImage": {"repository": RUNNER_REPOSITORY, "tag": TAG},
        "replicas": replicas,
        "watchNamespaces": list(watch_namespaces),
        "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
        "tolerations": [{"key": NODE_TAINT["key"], "operator": "Equal",
                         "value": NODE_TAINT["value"], "effect": NODE_TAINT["effect"]}],
    }
    if catalog is not None:
        values["config"] = {
            "instanceCatalogVolume": {"hostPath": {"path": str(catalog.parent),
                                                   "type": "Directory"}},
            "instanceCatalogFile": catalog.name}
    return merge(values, extra or {})


# The pod annotation that carries the operator image's docker ID, so that `helm upgrade`
# rolls the operator when `hack/images.sh` imported a new build under the same :dev tag.
IMAGE_ID_ANNOTATION = "nightshift.io/operator-image-id"


def imported_image_id(state: Path, repository: str = OPERATOR_REPOSITORY) -> str | None:
    """The docker ID of the image hack/images.sh last imported into the real node's
    containerd (its stamp beside containerd's root); None before any import."""
    stamps = nodeconfig.imported_dir(state / "realnode" / "containerd" / "config.toml")
    stamp = stamps / f"{repository}.id" if stamps else None
    if stamp is None or not stamp.exists():
        return None
    return stamp.read_text().strip() or None


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` into `base`, maps recursively (as Helm merges values files)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def helm(helm_bin: str, kubeconfig: str, *args: str,
         values: dict[str, Any] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run helm against `kubeconfig`; `values` go in as a values file. Never raises on
    helm's exit code: callers say what failed."""
    # A private helm home per call: nothing of the user's helm config, repositories or
    # plugins, and no fixed /tmp path another local user could create first.
    with (tempfile.TemporaryDirectory(prefix="nightshift-helm-") as home,
          tempfile.NamedTemporaryFile("w", suffix=".json", prefix="nightshift-values-") as f):
        env = {**os.environ, "KUBECONFIG": kubeconfig, "HELM_CACHE_HOME": f"{home}/cache",
               "HELM_CONFIG_HOME": f"{home}/config", "HELM_DATA_HOME": f"{home}/data"}
        extra: list[str] = []
        if values is not None:
            json.dump(values, f)
            f.flush()
            extra = ["--values", f.name]
        return subprocess.run([helm_bin, *args, *extra], capture_output=True, text=True,
                              env=env, check=False, timeout=timeout)


def upgrade_install(helm_bin: str, kubeconfig: str, chart: Path, release: str,
                    namespace: str, values: dict[str, Any], *, reuse_values: bool = False,
                    wait: str = "180s") -> subprocess.CompletedProcess[str]:
    """`helm upgrade --install --wait`: install, or upgrade in place (a pod template
    change rolls the operator)."""
    args = ["upgrade", "--install", release, str(chart), "--namespace", namespace,
            "--create-namespace", "--wait", f"--timeout={wait}"]
    if reuse_values:
        args.append("--reuse-values")
    return helm(helm_bin, kubeconfig, *args, values=values)
