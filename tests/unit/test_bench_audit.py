"""The benches' audit-log tallies (bench/auditlog.py): what a run's figures rest on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from auditlog import foreign_writes, pod_work


def entry(verb: str, resource: str, namespace: str, code: int = 200,
          subresource: str | None = None, stage: str = "ResponseComplete") -> dict[str, Any]:
    ref = {"resource": resource, "namespace": namespace}
    if subresource:
        ref["subresource"] = subresource
    return {"verb": verb, "stage": stage, "objectRef": ref,
            "responseStatus": {"code": code}}


def test_pod_work_counts_the_run_namespaces_pod_writes_by_kind_and_conflicts() -> None:
    entries = [
        entry("create", "pods", "run"), entry("create", "pods", "run"),
        entry("create", "pods", "run", subresource="binding"),
        entry("patch", "pods", "run", subresource="status"),
        entry("patch", "pods", "run", subresource="status", code=409),
        entry("patch", "pods", "run"),
        entry("delete", "pods", "run"),
        entry("get", "pods", "run"),                                 # a read
        entry("create", "pods", "run", stage="RequestReceived"),     # the same call, twice
        entry("create", "pods", "other"),                            # not the run's
        entry("patch", "jobs", "run", subresource="status"),         # not a pod
    ]
    assert pod_work(entries, "run") == {
        "conflict": 1, "create binding": 1, "create pod": 2, "delete pod": 1,
        "patch pod": 1, "patch status": 1}


def test_foreign_writes_skip_the_benchs_namespaces_leases_and_nodes() -> None:
    entries = [entry("create", "pods", "run"), entry("create", "pods", "elsewhere"),
               entry("update", "leases", "kube-system"), entry("patch", "nodes", ""),
               entry("delete", "configmaps", "elsewhere"), entry("get", "pods", "elsewhere")]
    assert foreign_writes(entries, ("run",)) == 2
