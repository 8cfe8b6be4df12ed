"""The item's task record against a real S3 server (versitygw) with an identity its
bucket policy limits, as IAM would: stage-in writes the attempt's first record before
any step, so an archive that refuses it fails the item there, naming the key and the
grant, instead of the item succeeding with no record and nothing in the run's status
but the sidecar's log. The same record keeps a lost attempt in the next one's history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightshift.runner.storageerr import RECORDS_NEED
from tests.integration.test_runner_s3 import BUCKET, config, get_json, keys, run_pod
from tests.s3server import VersityGW, running, s3server

__all__ = ["s3server"]  # the fixture, imported explicitly (no shared conftest edits)

USER = "pipeline"
RECORD = "proj/_nightshift/run1/reduce/0.json"


@pytest.fixture
def limited() -> Iterator[VersityGW]:
    """versitygw with a second account, USER, which the bucket's policy refuses
    s3:PutObject under proj/_nightshift/ (the records) and allows everything else."""
    with running(users=(USER,)) as gw:
        gw.client().create_bucket(Bucket=BUCKET)
        gw.deny(BUCKET, USER, "s3:PutObject", "proj/_nightshift/")
        yield gw


def test_an_archive_that_refuses_the_record_fails_the_item_before_its_steps(
        limited: VersityGW, tmp_path: Path) -> None:
    gw = limited
    # The identity may write the outputs: only the records' prefix is refused.
    gw.client(USER).put_object(Bucket=BUCKET, Key="proj/probe", Body=b"x")
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/"}])
    ran = tmp_path / "step-ran"
    pod = run_pod(gw, tmp_path / "pod", cfg,
                  [("only", f'touch {ran}; echo x > "$NIGHTSHIFT_OUTPUTS/x"')], ["a"],
                  cache=False, extra_env=gw.credentials_env("data", USER))
    assert pod.stage_in_rc == 1, pod  # the same on a retry: not exit 75
    assert not ran.exists(), "no step runs when the item could not be recorded"
    assert not keys(gw, "proj/out/") and not keys(gw, "proj/_nightshift/")
    said = next(line for line in pod.stage_in_log.splitlines() if "stage-in failed" in line)
    assert (f"stage-in failed (exit 1): archive (data: s3://{BUCKET}/{RECORD}): task record "
            "not written: ") in said, said
    assert "An error occurred (AccessDenied) when calling the PutObject operation" in said
    assert said.endswith(f"the pod's S3 identity is refused: {RECORDS_NEED}"), said


def test_an_attempt_lost_after_stage_in_stays_in_the_next_ones_history(
        s3server: VersityGW, tmp_path: Path) -> None:
    gw = s3server
    gw.client().create_bucket(Bucket=BUCKET)
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/"}])
    lost = run_pod(gw, tmp_path / "lost", cfg, [("only", "exit 0")], ["a"], cache=False,
                   stage_in_only=True)
    assert lost.stage_in_rc == 0
    first = get_json(gw, RECORD)
    assert (first["attempt"], first["phase"], first["pod"]) == (1, "running", "pod-0"), first
    assert first.get("end") is None and first["previousAttempts"] == []

    pod = run_pod(gw, tmp_path / "next", cfg, [("only", 'echo x > "$NIGHTSHIFT_OUTPUTS/x"')],
                  ["a"], cache=False)
    assert pod.rc == 0
    rec = get_json(gw, RECORD)
    assert (rec["attempt"], rec["phase"]) == (2, "succeeded"), json.dumps(rec)
    assert [(a["attempt"], a["phase"], a["end"]) for a in rec["previousAttempts"]] == [
        (1, "running", None)], rec["previousAttempts"]
