"""What a failed item's sample says: the end of its message, and the runner's own line."""

from __future__ import annotations

from pathlib import Path

from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.samples import failure_sample, message_tail
from nightshift.runner.main import termination_message
from tests.unit.test_plan import (
    advance,
    failed,
    items_for,
    make_run,
    observe,
    stage_status,
    start_a,
)


def test_a_short_message_is_kept_whole() -> None:
    assert message_tail("  Error: no such file  \n") == "Error: no such file"


def test_a_log_tail_keeps_its_last_whole_lines() -> None:
    lines = [f"INFO step progress line {i:03d}" for i in range(200)]
    text = "\n".join([*lines, "Traceback: ValueError: night 2024-01-03 has no flats"])
    got = message_tail(text, limit=120)
    assert got.startswith("…INFO step progress line")
    assert got.endswith("ValueError: night 2024-01-03 has no flats")
    assert len(got) <= 120
    assert got[1:].split("\n")[0] in lines  # cut at a line start, not mid-line


def test_one_long_line_keeps_its_end() -> None:
    got = message_tail("x" * 500 + "the reason", limit=50)
    assert got == "…" + ("x" * 500 + "the reason")[-49:]


def test_the_runner_writes_its_termination_message(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")  # the kubelet creates it in every container
    termination_message("stage-in failed (exit 66): missing input: raw/2024-01-03/x.fits",
                        log)
    assert log.read_text() == "stage-in failed (exit 66): missing input: raw/2024-01-03/x.fits"


def test_no_termination_log_outside_a_container(tmp_path: Path) -> None:
    termination_message("anything", tmp_path / "absent")
    assert not (tmp_path / "absent").exists()


def test_a_cut_at_a_line_start_keeps_that_line() -> None:
    text = "x" * 20 + "\n" + "y" * 100 + "\n" + "z" * 138
    assert message_tail(text, limit=240) == "…" + "y" * 100 + "\n" + "z" * 138


def test_the_runners_own_last_line_is_kept_whole_with_its_field_and_its_fix() -> None:
    # The sidecar's why names the stage's output first and the fix last.
    own = ("nightshift: committing outputs failed: stage calibrate outputs[0] (out/{item}/)"
           " is required, but the steps wrote no file under /nightshift/outputs/0: write "
           "the step's results there, or set outputs[0].required: false " + "x" * 300)
    got = message_tail("\n".join(["step log line"] * 50 + [own]))
    assert got == "…" + own, got
    assert message_tail(own) == own
    # run.sh's own line too; a user's long last line keeps only its end.
    fuse = "nightshift: /data is not mounted in this pod after 120 s " + "y" * 400
    assert message_tail(fuse) == fuse
    assert message_tail("user: " + "y" * 400) == "…" + ("user: " + "y" * 400)[-239:]
    # Bounded still: the status keeps at most OWN_LINE_LIMIT of one.
    huge = message_tail("stage-in failed (exit 1): " + "z" * 3000)
    assert len(huge) == 700 and huge.startswith("stage-in failed (exit 1): zz"), huge[:40]
    # After other lines, the leading "…" counts too: the status keeps all 700.
    after = message_tail("earlier line\nnightshift: " + "z" * 3000)
    assert len(after) == 700 and after.startswith("…nightshift: ") and after.endswith("z…")


def test_the_status_keeps_the_last_words_of_a_long_log_tail() -> None:
    # A failed pod whose log ends in its reason, after more than a sample keeps: the
    # status shows the tail's end, not the head of the tail.
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    log = "\n".join([f"INFO reducing chunk {i:03d} of night 2024-01-03" for i in range(40)]
                    + ["ValueError: night 2024-01-03 has no flats"])
    pod = {"metadata": {"name": "p-17", "annotations": {
               "batch.kubernetes.io/job-completion-index": "17"},
               "ownerReferences": [{"kind": "Job", "name": job["metadata"]["name"],
                                    "controller": True}]},
           "status": {"containerStatuses": [{"name": "main", "state": {"terminated": {
               "exitCode": 3, "reason": "Error", "message": log}}}]}}
    own = "nightshift: committing outputs failed: stage a outputs[0] " + "w" * 500
    pod2 = {**pod, "status": {"containerStatuses": [{"name": "main", "state": {
        "terminated": {"exitCode": 75, "reason": "Error", "message": log + "\n" + own}}}]}}
    got = plan(observe(run, [failed(job, "0-16,18-99", "17")], items=items_for(run, "a", "b"),
                       samples={"a": [failure_sample(pod), failure_sample(pod2)]}))
    first, second = stage_status(got, "a")["failureSamples"]
    assert first["message"].endswith("ValueError: night 2024-01-03 has no flats"), first
    assert second["message"] == "…" + own, second
