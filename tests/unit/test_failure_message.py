"""What a failed item's sample says: the end of its message, and the runner's own line."""

from __future__ import annotations

from pathlib import Path

from nightshift.pipelinerun.samples import message_tail
from nightshift.runner.main import termination_message


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
