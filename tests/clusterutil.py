"""Helpers for integration tests that run against any KUBECONFIG (local cluster, kind, EKS)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
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


class Kubectl:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.bin = kubectl_bin()

    def __call__(self, *args: str, input_: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([self.bin, f"--kubeconfig={self.kubeconfig}", *args],
                           input=input_, capture_output=True, text=True, check=False)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
        return r

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None,
              check: bool = True) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        args = ["apply", "-f", "-"]
        if namespace:
            args += ["-n", namespace]
        return self(*args, input_=text, check=check)


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
