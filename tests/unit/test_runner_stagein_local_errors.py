"""A key that can never be a file in the pod fails stage-in for good (exit 1), naming
the input and the key; a full disk or an I/O error stays a temporary failure (75).

Found by an audit: every local OSError was exit 75, so such an item spent its retries
on the same failure, and the message did not name the input.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.runner import main
from nightshift.runner.config import RunnerConfig
from nightshift.runner.download import Downloader
from nightshift.runner.store import ObjectInfo
from tests.unit.runner_s3 import BUCKET, bucket, config


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def stage_in(tmp_path: Path, cfg: RunnerConfig, caplog: pytest.LogCaptureFixture
             ) -> tuple[int, str]:
    root = tmp_path / "pod"
    (root / "items").mkdir(parents=True)
    (root / "items" / "items").write_text("n1\n")
    env = {"NIGHTSHIFT_ROOT": str(root), "NIGHTSHIFT_RUNNER_CONFIG": cfg.dumps(),
           "JOB_COMPLETION_INDEX": "0", "NIGHTSHIFT_IMDS_ENDPOINT": "",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    with caplog.at_level(logging.ERROR):
        rc = main.cmd_stage_in(env)
    [said] = [r.getMessage() for r in caplog.records if "stage-in failed" in r.getMessage()]
    return rc, said


INPUT = [{"storage": "data", "path": "raw/{item}/", "cache": False}]
LONG = "proj/raw/n1/" + "x" * 300 + ".fits"


@pytest.mark.parametrize(("objects", "key"), [
    ({LONG: b"a long name"}, LONG),
    ({"proj/raw/n1/cal": b"a file", "proj/raw/n1/cal/flat.fits": b"and a folder"}, None),
], ids=["name-too-long", "file-and-folder"])
def test_a_key_that_cannot_be_a_file_fails_for_good_naming_the_input(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        objects: dict[str, bytes], key: str | None) -> None:
    for k, v in objects.items():
        s3.put_object(Bucket=BUCKET, Key=k, Body=v)
    rc, said = stage_in(tmp_path, config(INPUT, []), caplog)
    assert rc == 1, said
    assert said.startswith(f"stage-in failed (exit 1): inputs[0] (data: s3://{BUCKET}/"
                           f"proj/raw/n1/): object '{key or 'proj/raw/n1/cal'}"), said
    assert said.endswith("rename or remove the object, or stage a prefix that holds no "
                         "such key"), said


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_full_disk_or_an_io_error_stays_temporary(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    s3.put_object(Bucket=BUCKET, Key="proj/raw/n1/f.fits", Body=b"data")

    def fails(self: Downloader, obj: ObjectInfo, dest: Path) -> None:
        raise OSError(code, "the test's error", str(dest))

    monkeypatch.setattr(Downloader, "download", fails)
    rc, said = stage_in(tmp_path, config(INPUT, []), caplog)
    assert rc == 75, said
