"""`kubectl nightshift items` and `logs` on an mpi stage: its MPIJob is read as the
operator reads it (one item), and `logs` shows the launcher's, which runs mpirun."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import mpijob
from nightshift.pipelinerun.plan import plan
from tests.unit.test_mpijob import NPB, _created, _observe
from tests.unit.test_plugin_cli import FakeKube, call


def _pod(name: str, role: str) -> dict[str, Any]:
    labels = {**it.attempt_labels("npb", "ep", 0), "training.kubeflow.org/job-role": role}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "physics", "labels": labels,
                         "creationTimestamp": "2025-03-01T12:01:00Z"},
            "spec": {"containers": [{"name": "ep"}]}, "status": {}}


def _running() -> FakeKube:
    run, job = _created([NPB])
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}],
                     "replicaStatuses": {"Worker": {"active": 4}, "Launcher": {"active": 1}}}
    run["status"] = plan(_observe(run, [mpijob.as_job(job)])).status
    run["metadata"]["resourceVersion"] = "5"
    cms = it.items_configmaps(it.RunRef.of(run), "ep", ["0"], last_step="ep")
    name = job["metadata"]["name"]
    pods = [_pod(f"{name}-worker-0", "worker"), _pod(f"{name}-launcher-x1", "launcher")]
    return FakeKube([run, job, *cms, *pods],
                    {(f"{name}-launcher-x1", "ep"): "EP Benchmark Completed.\n"})


def test_items_of_a_running_mpi_stage_read_its_mpijob(
        capsys: pytest.CaptureFixture[str]) -> None:
    kube = _running()
    code, out = call(kube, "items", "npb", "--stage", "ep", "-o", "json")
    assert code == 0, out
    (st,) = json.loads(capsys.readouterr().out)["stages"]
    # Not "unknown", which says the stage's Jobs are gone.
    assert [r["state"] for r in st["items"]] == ["unfinished"]
    assert ("list", "MPIJob", "nightshift.io/pipeline-run=npb,nightshift.io/stage=ep",
            None) in kube.calls


def test_logs_of_an_mpi_stage_are_its_launchers(capsys: pytest.CaptureFixture[str]) -> None:
    kube = _running()
    code, out = call(kube, "logs", "npb", "--stage", "ep", "--index", "0")
    assert code == 0, out
    assert capsys.readouterr().out == "EP Benchmark Completed.\n"
    assert [c[1] for c in kube.calls if c[0] == "log"] == [
        f"{kube.objects[1]['metadata']['name']}-launcher-x1"]


def test_records_skip_an_mpi_stage_saying_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = call(_running(), "records", "npb")
    assert code == 0, out
    assert "stage ep: an mpi stage writes no task records; skipped" in out
