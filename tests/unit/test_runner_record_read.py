"""Stage-in reads the item's last task record to number its attempt. A read that failed
for a moment (S3's 5xx or throttling after the store's retries, a lost connection)
used to count as "no record": the attempt was numbered 1, its "running" record
replaced the item's history, and its failed outputs were saved over those of the
earlier attempt 1. Now stage-in exits 75 (a per-item retry) and writes nothing; a
missing or damaged record still means attempt 1."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from nightshift.aws.s3store import S3Store
from nightshift.runner import main
from tests.unit.runner_s3 import BUCKET, bucket, config

KEY = "proj/_nightshift/r/s/0.json"
EARLIER = {"attempt": 2, "phase": "failed", "exitCode": 3, "previousAttempts": [
    {"attempt": 1, "phase": "failed", "exitCode": 3}]}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def stage_in(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> tuple[int, str]:
    root = tmp_path / "pod"
    (root / "items").mkdir(parents=True)
    (root / "items" / "items").write_text("n1\n")
    env = {"NIGHTSHIFT_ROOT": str(root),
           "NIGHTSHIFT_RUNNER_CONFIG": config([], [], archive=True).dumps(),
           "JOB_COMPLETION_INDEX": "0", "NIGHTSHIFT_IMDS_ENDPOINT": "",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    with caplog.at_level(logging.INFO):
        rc = main.cmd_stage_in(env)
    return rc, "\n".join(r.getMessage() for r in caplog.records)


def stored(s3: Any) -> dict[str, Any]:
    body: bytes = s3.get_object(Bucket=BUCKET, Key=KEY)["Body"].read()
    rec: dict[str, Any] = json.loads(body)
    return rec


SLOWDOWN: Any = {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate"},
                 "ResponseMetadata": {"HTTPStatusCode": 503}}


@pytest.mark.parametrize("error", [
    ClientError(SLOWDOWN, "GetObject"),
    EndpointConnectionError(endpoint_url="https://s3.example"),
], ids=["slowdown", "connection"])
def test_a_record_read_that_failed_for_a_moment_is_retried_and_overwrites_nothing(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=json.dumps(EARLIER).encode())

    def fails(self: S3Store, key: str) -> bytes | None:
        raise error

    monkeypatch.setattr(S3Store, "get_bytes", fails)
    rc, said = stage_in(tmp_path, caplog)
    assert rc == 75, said
    assert (f"stage-in failed (exit 75): archive (s3://{BUCKET}/{KEY}): the item's last "
            "task record could not be read, so this attempt could not be numbered after "
            "it") in said, said
    assert "tried again (a per-item retry)" in said
    assert stored(s3) == EARLIER  # neither a "running" nor a failure record over it


def test_the_record_read_numbers_the_attempt_after_the_last(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=json.dumps(EARLIER).encode())
    rc, said = stage_in(tmp_path, caplog)
    assert rc == 0, said
    rec = stored(s3)
    assert (rec["attempt"], rec["phase"]) == (3, "running")
    assert [a["attempt"] for a in rec["previousAttempts"]] == [1, 2]


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe\x00"], ids=["json", "utf8"])
def test_a_damaged_record_is_no_record_and_does_not_fail_the_item(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, body: bytes) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=body)
    rc, said = stage_in(tmp_path, caplog)
    assert rc == 0, said
    rec = stored(s3)
    assert (rec["attempt"], rec["phase"], rec["previousAttempts"]) == (1, "running", [])
    assert "is damaged" in said
