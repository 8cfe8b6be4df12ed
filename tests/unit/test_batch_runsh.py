"""run.sh's batch loop (stages[].batch), executed by a real /bin/sh (and bash in POSIX
mode): every item once and in order, retries in place, permanent codes, a retry Job's
listed items, SIGTERM, each item's own fields."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nightshift.api import names
from nightshift.pipelinerun import batch
from nightshift.pipelinerun import items as it

RUN = it.RunRef(name="nightly", namespace="physics", uid="uid-1")

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
