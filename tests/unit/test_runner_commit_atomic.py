"""A commit that fails part-way leaves nothing that looks committed: every output's
files go up before any manifest, and an error takes the manifests back out and sends
the outputs the failed way (failedPrefix), as a failed step does.

Found by an audit: an error on the second output left the first one's `_SUCCESS` and
files, and the second's uploaded files, for an item reported failed (exit 75).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.commit import Committer, safe
from nightshift.runner.config import Item, Paths
from tests.unit.runner_s3 import bucket, config, keys, stores, write

OUTPUTS = [{"storage": "data", "path": "out/{item}/", "localPath": "a"},
           {"storage": "data", "path": "cat/{item}/", "localPath": "b"}]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from bucket(monkeypatch)


def committer(s3: Any, tmp_path: Path) -> Committer:
    cfg = config([], OUTPUTS)
    paths = Paths(tmp_path / "pod")
    com = Committer(cfg, paths, Item("n1", 0, 0), 1, stores(cfg, s3))
    com.prepare()
    write(paths.outputs, "a/x.txt", b"x")
    write(paths.outputs, "b/y1.txt", b"y1")
    write(paths.outputs, "b/y2.txt", b"y2")
    return com


def test_an_upload_failing_in_the_second_output_commits_neither(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    com = committer(s3, tmp_path)
    real = S3Store.put_file

    def reset_on_y2(self: S3Store, local: Path, key: str, sha: str) -> Any:
        if key == "proj/cat/n1/y2.txt":
            raise ConnectionResetError(104, "Connection reset by peer")
        return real(self, local, key, sha)

    monkeypatch.setattr(S3Store, "put_file", reset_on_y2)
    res = safe(com.commit_success, "commit")
    assert not res.ok and res.error == "ConnectionResetError: [Errno 104] Connection reset by peer"
    assert keys(s3, "proj/out/") == set() and keys(s3, "proj/cat/") == set()
    assert keys(s3, "proj/failed/") == {"proj/failed/out/n1/attempt-1/x.txt",
                                        "proj/failed/cat/n1/attempt-1/y1.txt",
                                        "proj/failed/cat/n1/attempt-1/y2.txt"}
    # What the sidecar's record counts as failedOutputs.
    assert res.failed_keys == 3


def test_a_manifest_write_failing_takes_the_first_outputs_manifest_back(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    com = committer(s3, tmp_path)
    real = S3Store.put_bytes

    def refused_on_cat(self: S3Store, key: str, data: bytes, content_type: str = "") -> None:
        if key.startswith("proj/cat/") and key.endswith("/_SUCCESS"):  # its manifest
            raise PermissionError(13, "refused")
        real(self, key, data)

    monkeypatch.setattr(S3Store, "put_bytes", refused_on_cat)
    res = safe(com.commit_success, "commit")
    assert not res.ok
    assert keys(s3, "proj/out/") == set() and keys(s3, "proj/cat/") == set()
    assert len(keys(s3, "proj/failed/")) == 3


def test_a_manifest_the_undo_cannot_withdraw_is_in_the_items_error(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # out's manifest is written, cat's refused, and the undo's delete of out's manifest
    # fails too: the item's error (its failure sample) says which prefix still reads as
    # committed, after the commit's own error. It was only in the sidecar's log.
    com = committer(s3, tmp_path)
    real_put, real_delete = S3Store.put_bytes, S3Store.delete

    def refused_on_cat(self: S3Store, key: str, data: bytes, content_type: str = "") -> None:
        if key.startswith("proj/cat/") and key.endswith("/_SUCCESS"):  # its manifest
            raise PermissionError(13, "refused")
        real_put(self, key, data)

    def manifest_delete_fails(self: S3Store, doomed: list[str]) -> None:
        if "proj/out/n1/_SUCCESS" in doomed:
            raise ConnectionResetError(104, "Connection reset by peer")
        real_delete(self, doomed)

    monkeypatch.setattr(S3Store, "put_bytes", refused_on_cat)
    monkeypatch.setattr(S3Store, "delete", manifest_delete_fails)
    res = safe(com.commit_success, "commit")
    assert not res.ok and res.error is not None
    first, _, then = res.error.partition("; ")
    assert first.startswith("PermissionError")
    assert then == ("outputs[0]'s proj/out/n1/_SUCCESS could not be withdrawn "
                    "(ConnectionResetError: [Errno 104] Connection reset by peer): until a "
                    "retry of this item commits, or it is deleted by hand, that prefix reads "
                    "as committed")
    assert "proj/out/n1/_SUCCESS" in keys(s3, "proj/out/")  # what the error warns of
