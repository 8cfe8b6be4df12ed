"""MPI stages: the rendered MPIJob, its status read as a Job's, and the planner around it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nightshift.pipelinerun import mpijob
from nightshift.pipelinerun.items import RunRef
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import ItemsInfo, Observed
from nightshift.pipelinerun.spec import Mpi, PipelineRunSpec
from tests.golden_util import check_golden
from tests.unit.test_plan import T0, make_run

RUN = RunRef("npb", "hpc", "u1")
NPB = {"name": "ep", "image": "nightshift-mpi:dev", "pool": "cc",
       "resources": {"requests": {"cpu": "8", "memory": "8Gi"}},
       "mpi": {"workers": 4, "processesPerWorker": 8, "threadsPerProcess": 2},
       "steps": [{"name": "ep", "command": ["ep"], "args": ["A"]}]}


def render(stage: dict[str, Any], attempt: int = 0, **spec: Any) -> dict[str, Any]:
    s = PipelineRunSpec.model_validate({"stages": [stage], **spec})
    return mpijob.render_mpijob(run=RUN, spec=s, stage=s.stages[0], attempt=attempt,
                                suspend=False)


def test_golden_npb_mpijob() -> None:
    check_golden("pipelinerun/mpijob-npb.yaml", render(NPB, virtualCluster="hpc"))


def test_ranks_threads_and_the_launchers_command_line() -> None:
    job = render(NPB)
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"] == ["sh", "-c", mpijob.DNS_WAIT, "nightshift-wait-for-workers",
                                   "mpirun", "-n", "32", "--bind-to", "none",
                                   "-x", "OMP_NUM_THREADS", "ep", "A"]
    assert {"name": "OMP_NUM_THREADS", "value": "2"} in launcher["env"]
    assert job["spec"]["slotsPerWorker"] == 8
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == 4
    worker = workers["template"]["spec"]["containers"][0]
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 2222
    assert worker["resources"] == NPB["resources"]
    assert launcher["resources"] == mpijob.LAUNCHER_RESOURCES


@pytest.mark.parametrize(("impl", "threads", "expect"), [
    ("OpenMPI", 1, ["mpirun", "-n", "6", "-x", "OMP_NUM_THREADS", "prog"]),
    ("MPICH", 4, ["mpirun", "-n", "6", "-ppn", "3", "-genv", "OMP_NUM_THREADS", "4", "prog"]),
])
def test_mpirun_per_implementation(impl: str, threads: int, expect: list[str]) -> None:
    m = Mpi.model_validate({"workers": 2, "processesPerWorker": 3,
                            "threadsPerProcess": threads, "implementation": impl})
    assert mpijob.mpirun_argv(m, ["prog"], []) == expect


def test_pods_are_restricted_and_placed_on_the_pool() -> None:
    job = render(NPB, virtualCluster="hpc")
    for role in ("Launcher", "Worker"):
        pod = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["nodeSelector"] == {"nightshift.io/pool": "cc"}
        c = pod["containers"][0]
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False


def _mpijob(conditions: list[dict[str, Any]], active: int = 0) -> dict[str, Any]:
    job = render(NPB)
    job["metadata"].update(uid="m1", creationTimestamp="2025-03-01T12:00:00Z")
    job["status"] = {"conditions": conditions,
                     "replicaStatuses": {"Worker": {"active": active}}}
    return job


def test_as_job_maps_running_succeeded_and_failed() -> None:
    running = mpijob.as_job(_mpijob([{"type": "Running", "status": "True"}], active=4))
    assert running["status"]["active"] == 4 and "conditions" not in running["status"]
    done = mpijob.as_job(_mpijob([{"type": "Succeeded", "status": "True",
                                   "lastTransitionTime": "2025-03-01T12:05:00Z"}]))
    assert done["status"]["completedIndexes"] == "0"
    assert done["status"]["conditions"][0]["type"] == "Complete"
    bad = mpijob.as_job(_mpijob([{"type": "Failed", "status": "True", "reason": "MPIJobEvicted",
                                  "message": "1/4 workers are evicted"}]))
    assert bad["status"]["failedIndexes"] == "0"
    assert bad["status"]["conditions"][0]["reason"] == "MPIJobEvicted"


def _observe(run: dict[str, Any], jobs: list[dict[str, Any]]) -> Observed:
    return Observed(run=run, jobs=jobs, items={"ep": ItemsInfo(1, ("cm",)),
                                               "report": ItemsInfo(1, ("cm2",))},
                    failure_samples={}, now=T0, runner_image="runner:dev")


def test_planner_creates_the_mpijob_then_follows_it_to_success() -> None:
    report = {"name": "report", "image": "busybox:1.36", "dependsOn": ["ep"],
              "steps": [{"name": "main", "command": ["true"]}]}
    run = make_run([NPB, report])
    run["metadata"]["name"] = "npb"
    first = plan(_observe(run, []))
    created = [o for o in first.apply if o["kind"] == "MPIJob"]
    assert len(created) == 1 and not any(o["kind"] == "Job" for o in first.apply)
    assert first.requeue_after is not None  # no watch on MPIJobs: it looks again
    run["status"] = first.status
    job = created[0]
    job["metadata"].update(uid="m1", creationTimestamp="2025-03-01T12:00:00Z")
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True",
                                     "lastTransitionTime": "2025-03-01T12:05:00Z"}]}
    second = plan(_observe(run, [mpijob.as_job(job)]))
    ep = next(s for s in second.status["stages"] if s["name"] == "ep")
    assert ep["phase"] == "Succeeded"
    # The barrier holds for MPI stages like any other: the dependent starts now.
    assert [o["metadata"]["name"] for o in second.apply if o["kind"] == "Job"]


def _created(stages: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run named npb after its first pass (status written back) and the MPIJob that
    pass created, as the API server would show it (uid, creation time)."""
    run = make_run(stages)
    run["metadata"]["name"] = "npb"
    first = plan(_observe(run, []))
    run["status"] = first.status
    job = next(o for o in first.apply if o["kind"] == "MPIJob")
    job["metadata"].update(uid="m1", creationTimestamp="2025-03-01T12:00:00Z")
    return run, job


def test_a_failed_mpijob_fails_the_run_with_the_operators_reason() -> None:
    run, job = _created([NPB])
    job["status"] = {"conditions": [{"type": "Failed", "status": "True",
                                     "reason": "BackoffLimitExceeded",
                                     "message": "launcher failed 3 times"}]}
    out = plan(_observe(run, [mpijob.as_job(job)]))
    assert out.status["phase"] == "Failed"
    ep = out.status["stages"][0]
    assert ep["phase"] == "Failed" and "BackoffLimitExceeded" in str(ep)


def test_suspending_a_run_suspends_its_mpijob() -> None:
    run, job = _created([NPB])
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    run["spec"]["suspend"] = True
    out = plan(_observe(run, [mpijob.as_job(job)]))
    assert out.patch == [mpijob.suspend_patch(job["metadata"]["name"], "physics", True)]


def _wrapper_run(tmp_path: Path, getent: str | None) -> tuple[str, int]:
    """Run the launcher's wrapper under dash with a hostfile of two workers, a PATH of
    only `sleep` and, if given, a fake getent (a script); the lookups it logged."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("w-0.j.ns.svc slots=2\nw-1.j.ns.svc slots=2\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sleep").symlink_to("/bin/sleep")  # all the wrapper runs besides getent
    if getent is not None:
        (bin_dir / "getent").write_text(getent)
        (bin_dir / "getent").chmod(0o755)
    script = mpijob.DNS_WAIT.replace(mpijob.HOSTFILE, str(hostfile))
    out = subprocess.run(["/bin/dash", "-c", script, "wrapper", "/bin/echo", "mpirun", "ran"],
                         env={"PATH": str(bin_dir), "LOG": str(tmp_path / "log")},
                         capture_output=True, text=True, timeout=30, check=True)
    log = tmp_path / "log"
    return out.stdout, len(log.read_text().splitlines()) if log.exists() else 0


def test_launcher_waits_until_every_workers_name_resolves(tmp_path: Path) -> None:
    # Each name fails its first lookup and resolves on the second.
    fake = ('#!/bin/dash\necho "$2" >> "$LOG"\n'
            'n=0; while read -r l; do [ "$l" = "$2" ] && n=$((n+1)); done < "$LOG"\n'
            '[ "$n" -ge 2 ]\n')
    out, lookups = _wrapper_run(tmp_path, fake)
    assert out == "mpirun ran\n"
    assert lookups == 4  # two names, one failed and one good lookup each


def test_launcher_without_getent_runs_mpirun_at_once(tmp_path: Path) -> None:
    out, lookups = _wrapper_run(tmp_path, None)
    assert out == "mpirun ran\n" and lookups == 0
