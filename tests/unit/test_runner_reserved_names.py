"""A file a step writes at the top of an output under the manifest's name (Spark and
Hadoop write an empty `_SUCCESS`) is not committed: the manifest stands in for it.

Found by an audit: such a file was uploaded, then overwritten by the manifest, which
listed it as one of its files with the user's size and SHA-256, so a consumer checking
each listed file found a mismatch on a committed item.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths
from tests.unit.runner_s3 import BUCKET, bucket, config, get_json, keys, stores, write


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def committer(s3: Any, tmp_path: Path, mode: str = "batch") -> tuple[Committer, Paths]:
    cfg = config([], [{"storage": "data", "path": "out/{item}/", "mode": mode}])
    paths = Paths(tmp_path / "pod")
    com = Committer(cfg, paths, Item("n1", 0, 0), 1, stores(cfg, s3))
    com.prepare()
    return com, paths


def test_a_spark_success_marker_is_left_out_and_the_manifest_is_true(
        s3: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    com, paths = committer(s3, tmp_path)
    write(paths.outputs, "part-0000.parquet", b"data")
    write(paths.outputs, "_SUCCESS", b"")
    write(paths.outputs, "table/_SUCCESS", b"")  # not at the top: an ordinary file
    with caplog.at_level(logging.WARNING):
        assert com.commit_success().ok
    manifest = get_json(s3, "proj/out/n1/_SUCCESS")
    assert [f["key"] for f in manifest["files"]] == ["proj/out/n1/part-0000.parquet",
                                                     "proj/out/n1/table/_SUCCESS"]
    for f in manifest["files"]:
        body = s3.get_object(Bucket=BUCKET, Key=f["key"])["Body"].read()
        assert (len(body), hashlib.sha256(body).hexdigest()) == (f["size"], f["sha256"])
    [said] = [r.getMessage() for r in caplog.records if "not committed" in r.getMessage()]
    assert said.startswith(f"outputs[0]: {paths.outputs / '_SUCCESS'} not committed: "
                           "proj/out/n1/_SUCCESS is the commit's own manifest")


def test_interleave_never_puts_a_steps_success_file_where_the_manifest_goes(
        s3: Any, tmp_path: Path) -> None:
    com, paths = committer(s3, tmp_path, mode="interleave")
    write(paths.outputs, "_SUCCESS", b"", settled=True)
    write(paths.outputs, "part-0000.parquet", b"data", settled=True)
    com.interleave(set())
    com.interleave(set())
    # The marker (_SUCCESS.withdrawn, listing the upload) is the commit's, not the step's.
    assert keys(s3, "proj/out/") == {"proj/out/n1/part-0000.parquet",
                                     "proj/out/n1/_SUCCESS.withdrawn"}
