"""A failed pod as the run's failure sample: the first container that exited non-zero
says why, unless the kubelet evicted the pod, whose own reason and message say it."""

from __future__ import annotations

from typing import Any

from nightshift.pipelinerun.samples import failure_sample


def _pod(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "nightly-reduce-0-x", "annotations": {
        "batch.kubernetes.io/job-completion-index": "7"},
        "ownerReferences": [{"kind": "Job", "name": "nightly-reduce-0", "controller": True}]},
        "status": status}


def _killed(name: str, code: int, message: str) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": "Error",
                                                   "message": message}}}


def test_a_failed_step_says_its_exit_code_and_last_words() -> None:
    got = failure_sample(_pod({"phase": "Failed", "containerStatuses": [
        _killed("reduce", 3, "FITS header missing")]}))
    assert got == {"index": 7, "exitCode": 3, "reason": "Error",
                   "message": "FITS header missing", "pod": "nightly-reduce-0-x",
                   "job": "nightly-reduce-0"}


def test_an_evicted_pod_keeps_the_kubelets_reason() -> None:
    """The commit sidecar, first among the containers, was killed with 137: before, its
    'Error' and log tail hid why the kubelet evicted the pod."""
    said = 'Usage of EmptyDir volume "nightshift-work" exceeds the limit "1Gi". '
    got = failure_sample(_pod({"phase": "Failed", "reason": "Evicted", "message": said,
                               "initContainerStatuses": [
                                   _killed("nightshift-commit", 137, "committing...")],
                               "containerStatuses": [_killed("reduce", 137, "")]}))
    assert (got["reason"], got["message"], got["exitCode"]) == ("Evicted", said.strip(), 137)
