"""An archive that refuses the pod's task record, on the real node: the real kubelet
carries stage-in's line into the pod's status, and the run's failure sample (the same
function the reconcile pass uses) names the record's key and the missing grant. Before,
such an item succeeded, and only the sidecar's log said its record was not written.
Skipped without the real node or its images, as test_real_node.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.samples import OWN_LINE_LIMIT, failure_sample
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift.runner.storageerr import RECORDS_NEED
from tests.clusterutil import Kubectl, wait_for
from tests.integration.test_real_node import (
    BUCKET,
    RUNNER_IMAGE,
    gateway,
    real_node,
    s3_credentials,
    s3_storage,
    start_stage,
)
from tests.s3server import VersityGW, running

__all__ = ["gateway", "real_node"]  # fixtures, used by name below

USER = "pipelines"


@pytest.fixture
def limited_on_gateway(gateway: str) -> Iterator[VersityGW]:
    """versitygw where pods reach it, with an account its bucket policy refuses
    s3:PutObject under proj/_nightshift/ (the task records) and allows the rest."""
    with running(host=gateway, users=(USER,)) as gw:
        gw.client().create_bucket(Bucket=BUCKET)
        gw.deny(BUCKET, USER, "s3:PutObject", "proj/_nightshift/")
        yield gw


def test_a_refused_task_record_is_named_in_the_failure_sample(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str,
        limited_on_gateway: VersityGW) -> None:
    gw = limited_on_gateway
    s3_credentials(kubectl, namespace, gw, user=USER)
    spec = PipelineRunSpec.model_validate({
        "storage": [s3_storage(gw)],
        "archive": {"storage": "data"},
        "stages": [{
            "name": "calib", "image": RUNNER_IMAGE, "forEach": {"items": ["a", "b"]},
            "retries": {"perItem": 0},
            "outputs": [{"storage": "data", "path": "out/{item}/"}],
            "steps": [{"name": "main", "command": [
                "sh", "-c", 'echo done > "$NIGHTSHIFT_OUTPUTS/flat.txt"']}],
        }],
    })
    name = start_stage(kubectl, spec, namespace, "refused", ["a", "b"])

    def failed() -> dict[str, Any] | None:
        job = kubectl.kube.get("batch/v1", "Job", name, namespace)
        assert job is not None
        pods = kubectl.kube.list("v1", "Pod", namespace,
                                 label_selector=it.job_pods_selector(job))
        return next((p for p in pods if p["status"].get("phase") == "Failed"), None)

    pod = wait_for(f"a failed pod of {name}", failed, 180, interval=1)
    sample = failure_sample(pod)
    index = sample["index"]
    key = f"proj/_nightshift/refused/calib/{index}.json"
    message = sample["message"]
    assert sample["exitCode"] == 1, sample
    assert message.startswith(f"stage-in failed (exit 1): archive (data: s3://{BUCKET}/{key})"
                              ": task record not written: "), sample
    assert "(AccessDenied) when calling the PutObject operation" in message, sample
    assert message.endswith(f"the pod's S3 identity is refused: {RECORDS_NEED}"), sample
    assert len(message) <= OWN_LINE_LIMIT
    # The step never ran: no output, no record.
    listed = gw.client().list_objects_v2(Bucket=BUCKET, Prefix="proj/")
    assert not listed.get("Contents"), listed.get("Contents")
    print(message)  # what a user sees, for `pytest -s`
