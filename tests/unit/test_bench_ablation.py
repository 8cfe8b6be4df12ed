"""The ablation bench's pure parts: counting an object's managed fields, and the pod the
Job controller would create for a variant (what bare+fields is sized against)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from ablation import managed_fields, pod_as_created, variant_job


def test_managed_fields_counts_every_entry_of_every_manager() -> None:
    pod = {"metadata": {"managedFields": [
        {"manager": "kube-controller-manager", "fieldsV1": {
            "f:metadata": {"f:annotations": {".": {}, "f:a": {}, "f:b": {}}},
            "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:image": {}}}}}},
        {"manager": "kwok", "subresource": "status",
         "fieldsV1": {"f:status": {"f:phase": {}}}},
    ]}}
    # metadata, annotations, ".", a, b; spec, containers, the keyed one, ".", image;
    # status, phase.
    assert managed_fields(pod) == 12
    assert managed_fields({"metadata": {}}) == 0


def test_the_pod_as_created_carries_the_job_controllers_additions() -> None:
    job, _ = variant_job("bare", 3, 1.0)
    pod = pod_as_created(job, index=2)
    assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert pod["metadata"]["generateName"] == f"{job['metadata']['name']}-2-"
    full, _ = variant_job("full", 3, 1.0)
    assert "backoffLimitPerIndex" in full["spec"]
    assert "batch.kubernetes.io/job-index-failure-count" in pod_as_created(
        full)["metadata"]["annotations"]
