"""Helpers for integration tests that run against any KUBECONFIG (local cluster, kind, EKS)."""

from __future__ import annotations

import copy
import functools
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from nightshift.kube import Kube

ROOT = Path(__file__).resolve().parent.parent


def kubectl_bin() -> str:
    from nightshift_localcluster.paths import Layout

    try:
        path = Layout.discover().kubectl
        if path.exists():
            return str(path)
    except Exception:
        pass
    return "kubectl"


# The field manager of the tests' own server-side applies (never the operator's).
FIELD_MANAGER = "nightshift-tests"


class Kubectl:
    """kubectl on one kubeconfig, and an in-process client (`kube`) on the same one.

    A kubectl process costs about 0.09 CPU-seconds (start-up, kubeconfig, discovery
    cache), an in-process call a few milliseconds. The suite made about 2,000 kubectl
    calls, 160 CPU-seconds on a two-core machine whose parallel phase is CPU-bound, so
    set-up (namespaces, nodes, objects a test needs) goes through `kube`; kubectl runs
    where what it prints is what is tested (`apply_as_user`, logs, plugin commands).
    """

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.bin = kubectl_bin()

    @functools.cached_property
    def kube(self) -> Kube:
        k = Kube.for_user(self.kubeconfig)
        k.field_manager = FIELD_MANAGER
        return k

    def __call__(self, *args: str, input_: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([self.bin, f"--kubeconfig={self.kubeconfig}", *args],
                           input=input_, capture_output=True, text=True, check=False)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
        return r

    def apply(self, manifest: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Server-side apply of one object, in-process; `namespace` as kubectl's -n (only
        for a namespaced kind without one). A refusal raises KubeError with the API
        server's message. Returns the object as stored."""
        obj = copy.deepcopy(dict(manifest))
        meta = obj.setdefault("metadata", {})
        if (namespace and self.kube.resource(obj["apiVersion"], obj["kind"]).namespaced
                and meta.setdefault("namespace", namespace) != namespace):
            raise AssertionError(f"{obj['kind']} {meta.get('name')} is in namespace "
                                 f"{meta['namespace']}, not {namespace}")
        return self.kube.apply(obj)

    def apply_as_user(self, manifest: Mapping[str, Any] | str, namespace: str | None = None
                      ) -> subprocess.CompletedProcess[str]:
        """`kubectl apply -f -` as a person runs it, not checked: for tests of what the
        API server answers them (a CEL refusal's text as kubectl prints it)."""
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(dict(manifest))
        args = ["apply", "-f", "-"]
        if namespace:
            args += ["-n", namespace]
        return self(*args, input_=text, check=False)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60,
             interval: float = 0.5, explain: Callable[[], str] | None = None) -> Any:
    """Poll until check() is truthy; fail with a message naming what never happened and,
    with `explain`, the state that shows why (a timeout alone is not a diagnosis)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    state = f"\n{explain()}" if explain else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r}){state}")


def job_complete(kube: Kube, namespace: str, name: str) -> bool:
    job = kube.get("batch/v1", "Job", name, namespace)
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)
