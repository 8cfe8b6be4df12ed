"""Task batching (stages[].batch): the index<->item mapping, the batched Job, progress
counted in items, and run.sh's batch loop executed by a real /bin/sh."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nightshift.api import names
from nightshift.pipelinerun import batch
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.plan import plan
from tests.bad_pipelineruns import stage as plan_stage
from tests.golden_util import check_golden
from tests.unit.test_jobs import render, spec
from tests.unit.test_plan import (
    T0,
    advance,
    complete,
    failed,
    items_for,
    jobs_of,
    make_run,
    observe,
    stage_status,
    with_status,
)

RUN = it.RunRef(name="nightly", namespace="physics", uid="uid-1")

# --- mapping ---------------------------------------------------------------------------


def test_completions_and_positions_cover_every_item_once() -> None:
    for n, k in [(95, 10), (100, 10), (1, 10), (7, 1), (1000, 1000), (1001, 1000)]:
        c = batch.completions(n, k)
        assert c == -(-n // k)
        covered = [p for i in range(c) for p in batch.positions(i, k, n)]
        assert covered == list(range(n)), (n, k)
    # The last batch is short; an index past the end runs nothing.
    assert batch.positions(9, 10, 95) == range(90, 95)
    assert batch.positions(10, 10, 95) == range(95, 95)


def test_items_of_maps_through_a_retry_jobs_indexes() -> None:
    assert batch.items_of([0, 9], 10, 95, None) == {*range(10), *range(90, 95)}
    # A retry Job's positions are the items still to run, re-packed densely.
    mapping = [3, 17, 18, 19, 98, 99]
    assert batch.items_of([0], 4, len(mapping), mapping) == {3, 17, 18, 19}
    assert batch.items_of([1], 4, len(mapping), mapping) == {98, 99}


def test_tolerated_failures_count_whole_batches() -> None:
    assert batch.max_failed_indexes(20, 10, 10) == 2
    assert batch.max_failed_indexes(0, 10, 10) == 0
    assert batch.max_failed_indexes(50, 10, 3) == 3  # never above completions


# --- the batched Job ---------------------------------------------------------------------

BATCHED = {
    "forEach": {"range": {"from": 0, "to": 94, "format": "tile-{:03d}"}},
    "image": "montage/tools:6.0",
    "steps": [{"name": "project", "command": ["mProject"], "args": ["--fast"]},
              {"name": "fit", "command": ["mDiffFit"]}],
    "retries": {"perItem": 2, "permanentExitCodes": [3]},
    "tolerateFailedItems": 20,
    "batch": 10,
}


def test_golden_batched_job() -> None:
    job = render(spec(**BATCHED), completions=batch.completions(95, 10), positions=95)
    check_golden("pipelinerun/job-batched.yaml", job)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_batched_job_fields() -> None:
    job = render(spec(**BATCHED), completions=10, positions=95)
    s = job["spec"]
    assert s["completions"] == 10 and s["parallelism"] == 10
    assert s["maxFailedIndexes"] == 2 and s["backoffLimitPerIndex"] == 2
    pod = s["template"]["spec"]
    for c in [*pod["initContainers"], *pod["containers"]]:
        env = _env(c)
        assert env[names.ENV_BATCH] == "10" and env[names.ENV_BATCH_POSITIONS] == "95"
        assert env[names.ENV_BATCH_RETRIES] == "2" and env[names.ENV_BATCH_PERMANENT] == "3"
        assert env[names.ENV_BATCH_FAILURES] == {"fieldRef": {"fieldPath": (
            "metadata.annotations['batch.kubernetes.io/job-index-failure-count']")}}
        assert c["command"][:2] == ["/bin/sh", f"{names.MOUNT_ITEMS}/{names.RUN_SH_KEY}"]
    assert batch.job_positions(job) == 95


def test_unbatched_job_has_no_batch_env() -> None:
    job = render(spec(**{**BATCHED, "batch": 1, "tolerateFailedItems": 2}), completions=95)
    env = _env(job["spec"]["template"]["spec"]["containers"][0])
    assert not [k for k in env if k.startswith("NIGHTSHIFT_BATCH")]
    assert job["spec"]["maxFailedIndexes"] == 2 and batch.job_positions(job) is None


# --- plan and progress: items, not pods -----------------------------------------------------


def _run(k: int = 10, n: int = 95, **kw: Any) -> dict[str, Any]:
    return make_run([plan_stage("a", forEach={"range": {"from": 0, "to": n - 1}}, batch=k,
                                **kw),
                     plan_stage("b", dependsOn=["a"])])


def test_plan_creates_one_completion_per_batch_and_counts_items() -> None:
    run = _run()
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    assert job["spec"]["completions"] == 10
    assert stage_status(p, "a")["total"] == 95
    run = advance(run, p)
    # Half-way: indexes 0-3 done, 4 pods running.
    mid = with_status(job, completedIndexes="0-3", active=4, ready=4)
    p = plan(observe(run, [mid], items=items_for(run, "a", count=95)))
    a = stage_status(p, "a")
    assert a["succeeded"] == 40 and a["running"] == 4 and a["succeededItems"] == "0-39"
    assert p.status["progress"] == "40/95"
    assert p.patch == [], "parallelism is counted in batches: nothing to correct"
    p = plan(observe(run, [complete(job)], items=items_for(run, "a", "b", count=95)))
    a = stage_status(p, "a")
    assert a["phase"] == "Succeeded" and a["succeeded"] == 95 and a["attempts"][0]["items"] == 95
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["b"]


def test_a_failed_batch_counts_all_its_items_and_the_rerun_repacks_them() -> None:
    run = _run()
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    run = advance(run, p)
    first = failed(job, "0-1,3-8", "2,9")
    p = plan(observe(run, [first], items=items_for(run, "a", count=95)))
    a = stage_status(p, "a")
    assert a["succeeded"] == 80 and a["failed"] == 15 and a["failedItems"] == "20-29,90-94"
    assert a["phase"] == "Failed"
    run = advance(run, p)
    run["spec"]["rerunFailed"] = 1
    p = plan(observe(run, [first], items=items_for(run, "a", count=95)))
    cms = [m for m in p.apply if m["kind"] == "ConfigMap"]
    (retry,) = jobs_of(p)
    want = [*range(20, 30), *range(90, 95)]
    assert cms[0]["data"][names.INDEXES_KEY] == "".join(f"{i}\n" for i in want)
    assert retry["spec"]["completions"] == 2
    assert batch.job_positions(retry) == 15
    # The retry's second batch is items 30.. of its list: 90-94 of the stage's.
    again = failed(retry, "0", "1")
    run = advance(run, p)
    p = plan(observe(run, [first, again], items=items_for(run, "a", count=95)))
    a = stage_status(p, "a")
    assert a["succeeded"] == 90 and a["failedItems"] == "90-94"
    assert a["attempts"][1]["items"] == 15


def test_tolerated_batches_let_dependents_start() -> None:
    run = _run(tolerateFailedItems=20)
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    assert job["spec"]["maxFailedIndexes"] == 2
    run = advance(run, p)
    p = plan(observe(run, [failed(job, "0-1,3-8", "2,9")], items=items_for(run, "a", "b",
                                                                          count=95)))
    assert stage_status(p, "a")["phase"] == "Succeeded"  # 15 counted failures <= 20
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["b"]


def test_stage_view_without_a_recorded_total_reads_the_jobs_positions() -> None:
    job = render(spec(**BATCHED), completions=10, positions=95)
    job = with_status(job, completedIndexes="0-9")
    view = pg.stage_view({0: job}, 0, None, batch=10)
    assert view.total == 95 and view.succeeded == set(range(95))


def test_failure_sample_names_the_batchs_first_item() -> None:
    run = _run()
    p = plan(observe(run, items=items_for(run, "a", count=95)))
    (job,) = jobs_of(p)
    run = advance(run, p)
    samples = {"a": [{"index": 3, "exitCode": 1, "job": job["metadata"]["name"]}]}
    p = plan(observe(run, [failed(job, "0-2,4-9", "3")], items=items_for(run, "a", count=95),
                     samples=samples, now=T0))
    assert stage_status(p, "a")["failureSamples"][0]["index"] == 30


# --- run.sh's batch loop, in a real /bin/sh ----------------------------------------------

# The step: log "<item index> <item> <completion index>", then fail as the item's
# "plan" file says: each line is the exit code of one try (missing: 0).
STEP = r"""
printf '%s\t%s\t%s\n' "$NIGHTSHIFT_ITEM_INDEX" "$NIGHTSHIFT_ITEM" "$JOB_COMPLETION_INDEX" \
  >> "$LOG"
plan="$PLANS/$NIGHTSHIFT_ITEM_INDEX"
[ -e "$plan" ] || exit 0
n=0
[ -e "$plan.n" ] && read -r n < "$plan.n"
n=$((n + 1))
printf '%s\n' "$n" > "$plan.n"
i=0
while IFS= read -r rc; do
  i=$((i + 1))
  if [ "$i" -eq "$n" ]; then exit "$rc"; fi
done < "$plan"
exit 0
"""


# run.sh runs under whatever /bin/sh the user's image has: dash (Debian) and bash in
# POSIX mode (RHEL-like images) here; busybox ash (Alpine, busybox) is not installed on
# the development machine and not covered by these tests.
SHELLS = [["/bin/sh"], *([["/bin/bash", "--posix"]] if Path("/bin/bash").exists() else [])]


@pytest.fixture(params=SHELLS, ids=lambda sh: Path(sh[0]).name)
def shell(request: pytest.FixtureRequest) -> list[str]:
    return list(request.param)


class Pod:
    """One batched pod's view: the items volume, the work volume and the step's log."""

    def __init__(self, tmp: Path, items: list[str], k: int, retries: int = 2,
                 permanent: str = "3", indexes: list[int] | None = None,
                 steps: tuple[str, ...] = ("main",), shell: list[str] | None = None) -> None:
        self.shell = shell or ["/bin/sh"]
        self.dir = tmp / "items"
        self.work = tmp / "work"
        self.plans = tmp / "plans"
        for d in (self.dir, self.work, self.plans):
            d.mkdir()
        cms = it.items_configmaps(RUN, "s", items, last_step=steps[-1])
        if indexes is not None:
            cms += it.indexes_configmaps(RUN, "s", 1, indexes)
        for cm in cms:
            for key, value in cm["data"].items():
                (self.dir / key).write_text(value)
        self.log = tmp / "log"
        self.steps = steps
        self.positions = len(items) if indexes is None else len(indexes)
        self.env = {
            "PATH": "/usr/bin:/bin", "LOG": str(self.log), "PLANS": str(self.plans),
            names.ENV_BATCH: str(k), names.ENV_BATCH_POSITIONS: str(self.positions),
            names.ENV_BATCH_RETRIES: str(retries), names.ENV_BATCH_PERMANENT: permanent,
            names.ENV_BATCH_STATE: str(self.work), names.ENV_LAST_STEP: steps[-1],
        }

    def plan(self, item: int, *codes: int) -> None:
        (self.plans / str(item)).write_text("".join(f"{c}\n" for c in codes))

    def run(self, ci: int, step: str | None = None, **env: str) -> int:
        """One step container of the pod for completion index `ci`; its exit code."""
        out = subprocess.run(
            [*self.shell, str(self.dir / names.RUN_SH_KEY), step or self.steps[-1], "--",
             "/bin/sh", "-c", STEP],
            env={**self.env, names.ENV_COMPLETION_INDEX: str(ci), **env},
            capture_output=True, text=True, timeout=60, check=False)
        assert "no item" not in out.stderr, out.stderr
        return out.returncode

    def pod(self, ci: int, **env: str) -> int:
        """Every step, in order, as the kubelet runs them; the pod's exit code."""
        for step in self.steps:
            rc = self.run(ci, step, **env)
            if rc:
                return rc
        return 0

    def ran(self) -> list[tuple[int, str, int]]:
        if not self.log.exists():
            return []
        rows = [line.split("\t") for line in self.log.read_text().splitlines()]
        return [(int(a), b, int(c)) for a, b, c in rows]


ITEMS = [f"tile {i:02d} $(x) 'q'" for i in range(7)]


def test_every_item_runs_once_in_order_across_batches(tmp_path: Path, shell: list[str]) -> None:
    pod = Pod(tmp_path, ITEMS, 3, shell=shell)
    assert batch.completions(7, 3) == 3
    for ci in range(3):
        assert pod.run(ci) == 0
    # The step sees each item and its index, and the pod's own completion index.
    assert pod.ran() == [(i, ITEMS[i], i // 3) for i in range(7)]


@pytest.mark.parametrize("sed", [True, False])
def test_an_item_failing_once_is_retried_in_place(
        tmp_path: Path, sed: bool, shell: list[str]
) -> None:
    pod = Pod(tmp_path, ITEMS, 3, shell=shell)
    pod.plan(4, 1, 0)
    rc = pod.run(1, **({} if sed else {"PATH": "/nonexistent"}))
    assert rc == 0
    assert [r[0] for r in pod.ran()] == [3, 4, 4, 5]


def test_an_item_failing_every_try_fails_the_pod_after_the_rest_ran(
        tmp_path: Path, shell: list[str]
) -> None:
    pod = Pod(tmp_path, ITEMS, 3, retries=2, shell=shell)
    pod.plan(3, 7, 7, 7, 7)
    assert pod.run(1) == 7
    assert [r[0] for r in pod.ran()] == [3, 3, 3, 4, 5]


def test_a_permanent_exit_code_fails_the_item_at_once(tmp_path: Path, shell: list[str]) -> None:
    pod = Pod(tmp_path, ITEMS, 3, retries=2, permanent="3 9", shell=shell)
    pod.plan(0, 3)
    assert pod.run(0) == 3  # every failure permanent: the Job's FailIndex rule applies
    assert [r[0] for r in pod.ran()] == [0, 1, 2]


def test_a_retryable_failure_wins_over_a_permanent_one(tmp_path: Path, shell: list[str]) -> None:
    pod = Pod(tmp_path, ITEMS, 3, retries=0, permanent="3", shell=shell)
    pod.plan(0, 3)
    pod.plan(2, 5)
    assert pod.run(0) == 5  # the Job retries the batch for item 2's sake


def test_a_retry_pod_runs_each_item_once_more_without_in_place_retries(
        tmp_path: Path, shell: list[str]
) -> None:
    pod = Pod(tmp_path, ITEMS, 3, retries=2, shell=shell)
    pod.plan(4, 1, 1, 1)
    assert pod.run(1, **{names.ENV_BATCH_FAILURES: "1"}) == 1
    assert [r[0] for r in pod.ran()] == [3, 4, 5]


def test_items_known_done_are_skipped_on_a_retry(tmp_path: Path, shell: list[str]) -> None:
    pod = Pod(tmp_path, ITEMS, 3, shell=shell)
    (pod.work / ".nightshift-batch-3.done").write_text("")
    (pod.work / ".nightshift-batch-5.done").write_text("")
    assert pod.run(1) == 0
    assert [r[0] for r in pod.ran()] == [4]


def test_a_failed_item_skips_later_steps_and_the_last_step_fails_the_pod(
        tmp_path: Path, shell: list[str]
) -> None:
    pod = Pod(tmp_path, ITEMS, 3, retries=0, steps=("first", "last"), shell=shell)
    pod.plan(1, 6)
    assert pod.run(0, "first") == 0  # an earlier step leaves the verdict to the last
    assert pod.run(0, "last") == 6
    assert [r[0] for r in pod.ran()] == [0, 1, 2, 0, 2]
    assert (pod.work / ".nightshift-batch-1.failed").read_text() == "6 \n"


def test_a_retry_jobs_batches_run_its_listed_items(tmp_path: Path, shell: list[str]) -> None:
    pod = Pod(tmp_path, ITEMS, 2, indexes=[1, 4, 6], shell=shell)
    assert pod.pod(0) == 0 and pod.pod(1) == 0
    assert pod.ran() == [(1, ITEMS[1], 0), (4, ITEMS[4], 0), (6, ITEMS[6], 1)]


def test_unbatched_run_sh_is_unchanged(tmp_path: Path, shell: list[str]) -> None:
    pod = Pod(tmp_path, ITEMS, 1, shell=shell)
    env = {k: v for k, v in pod.env.items() if not k.startswith("NIGHTSHIFT_BATCH")}
    pod.env = env
    assert pod.run(4) == 0 and pod.ran() == [(4, ITEMS[4], 4)]
    pod.plan(5, 9)
    assert pod.run(5) == 9 and len(pod.ran()) == 2  # no in-place retry, exec'd as before


def test_sigterm_stops_the_batch_and_reaches_the_step(tmp_path: Path, shell: list[str]) -> None:
    pod = Pod(tmp_path, ITEMS, 3, shell=shell)
    marker = tmp_path / "got-term"
    step = (f"trap 'echo term > {marker}; exit 143' TERM; : > {tmp_path}/started; "
            "while :; do sleep 0.05; done")
    proc = subprocess.Popen(
        [*shell, str(pod.dir / names.RUN_SH_KEY), "main", "--", "/bin/sh", "-c", step],
        env={**pod.env, names.ENV_COMPLETION_INDEX: "0"})
    started = tmp_path / "started"
    for _ in range(200):
        if started.exists():
            break
        subprocess.run(["sleep", "0.05"], check=True)
    proc.terminate()
    assert proc.wait(timeout=20) == 143
    assert marker.read_text() == "term\n"
    assert not (pod.work / ".nightshift-batch-1.failed").exists()



def test_each_item_of_a_batch_gets_its_own_fields_and_argv(
        tmp_path: Path, shell: list[str]
) -> None:
    # A matrix across several chunks: the fields' `set -f` must not stop the next
    # lookup's chunk glob, and each item's placeholders start from the original argv.
    items = [f"{site}/{src}" for site in ("LAX", "PAS", "USC") for src in ("nr", "lp", "la")]
    folder = tmp_path / "items"
    folder.mkdir()
    cms = it.items_configmaps(RUN, "s", items, 24, last_step="main")
    assert len(cms) > 2
    for cm in cms:
        for key, value in cm["data"].items():
            (folder / key).write_text(value)
    log = tmp_path / "log"
    step = ('printf "%s|%s|%s|%s\\n" "$1" "$2" "$3" "$NIGHTSHIFT_ITEM_SITE" >> "$0"')
    for ci in range(batch.completions(len(items), 4)):
        out = subprocess.run(
            [*shell, str(folder / names.RUN_SH_KEY), "main", "--", "/bin/sh", "-c", step,
             str(log), "{site}", "{index}", "at-{source}-{item}"],
            env={"PATH": "/usr/bin:/bin", names.ENV_COMPLETION_INDEX: str(ci),
                 names.ENV_ITEM_FIELDS: "site source", names.ENV_BATCH: "4",
                 names.ENV_BATCH_POSITIONS: str(len(items)),
                 names.ENV_BATCH_STATE: str(tmp_path), names.ENV_LAST_STEP: "main"},
            capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
    want = [f"{v.split('/')[0]}|{i}|at-{v.split('/')[1]}-{v}|{v.split('/')[0]}"
            for i, v in enumerate(items)]
    assert log.read_text().splitlines() == want
