"""Task batching on KWOK: a batch: 10 stage of 95 items runs as 10 pods and counts items.

KWOK only simulates the pods (run.sh's loop never runs here; tests/unit/test_batch.py
runs it in a real /bin/sh): what this checks is the Job the API server accepts, that the
Job controller makes one pod per batch, and that the status counts items, not pods.
"""

from __future__ import annotations

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.pipelinerun import items as it
from tests.clusterutil import Kubectl
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import jobs, pipelinerun, stage, stage_status, wait_phase


def test_a_batched_stage_runs_ten_pods_for_95_items(kube: Kube, kubectl: Kubectl,
                                                     operator: OperatorProcess,
                                                     namespace: str, pool: str) -> None:
    kubectl.apply(pipelinerun("tiles", namespace, [
        stage("project", pool, n=95, batch=10),
        stage("fit", pool, n=3, dependsOn=["project"])]))
    run = wait_phase(kube, namespace, "tiles", {"Succeeded", "Failed"}, 180)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    project = stage_status(run, "project")
    assert project["total"] == 95 and project["succeeded"] == 95, project
    assert project["failed"] == 0 and project["succeededItems"] == "0-94", project
    assert project["attempts"][0]["items"] == 95
    assert run["status"]["progress"] == "98/98"
    (job,) = [j for j in jobs(kube, namespace, "tiles")
              if j["metadata"]["labels"][names.LABEL_STAGE] == "project"]
    assert job["spec"]["completions"] == 10
    assert job["status"]["completedIndexes"] == "0-9"
    pods = kube.list("v1", "Pod", namespace,
                     label_selector=it.job_pods_selector(job))
    assert len(pods) == 10, [p["metadata"]["name"] for p in pods]
