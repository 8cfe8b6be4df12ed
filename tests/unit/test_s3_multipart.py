"""Multipart uploads against moto's S3: a create whose answer is lost leaves no upload.

Seen on versitygw (tests/integration/test_runner_s3.py): the server killed just after it
made an upload; the runner's retry (or botocore's own, inside one call) made a second; the
first stayed, billed by S3 for its parts until a lifecycle rule or the item's next attempt
swept it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from moto import mock_aws

from nightshift.api.runnerwire import StorageConfig
from nightshift.aws import s3store
from nightshift.aws.s3store import S3Store


class LosesFirstCreateAnswer:
    """An S3 client whose first create_multipart_upload is made but not answered."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.creates = 0

    def create_multipart_upload(self, **kw: Any) -> Any:
        self.creates += 1
        answer = self.real.create_multipart_upload(**kw)
        if self.creates == 1:
            raise EndpointConnectionError(endpoint_url="http://s3")
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class RetriesLostCreateInside(LosesFirstCreateAnswer):
    """The same lost answer, retried inside botocore (its retry modes retry a dropped
    connection): one create call for us, two uploads on the server, RetryAttempts 1."""

    def create_multipart_upload(self, **kw: Any) -> Any:
        self.creates += 1
        self.real.create_multipart_upload(**kw)
        answer = dict(self.real.create_multipart_upload(**kw))
        answer["ResponseMetadata"] = {**answer.get("ResponseMetadata", {}), "RetryAttempts": 1}
        return answer


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(s3store, "PART_SIZE", 5 * 2**20)  # S3's smallest part
    monkeypatch.setattr(s3store, "MULTIPART_THRESHOLD", 5 * 2**20)
    monkeypatch.setattr("nightshift.aws.s3store.time.sleep", lambda s: None)
    with mock_aws():
        real = boto3.client("s3", region_name="us-east-1")
        real.create_bucket(Bucket="bkt")
        yield real


def store(client: Any) -> S3Store:
    return S3Store(StorageConfig("data", "s3", bucket="bkt", prefix="proj"), client)


def test_a_lost_create_answer_leaves_no_upload_behind(s3: Any, tmp_path: Path) -> None:
    body = bytes(range(256)) * (11 * 2**20 // 256)  # three 5 MiB parts
    local = tmp_path / "big.bin"
    local.write_bytes(body)
    flaky = LosesFirstCreateAnswer(s3)
    info = store(flaky).put_file(local, "proj/out/x/big.bin", hashlib.sha256(body).hexdigest())
    assert flaky.creates == 2
    assert info.size == len(body)
    assert s3.get_object(Bucket="bkt", Key="proj/out/x/big.bin")["Body"].read() == body
    assert s3.list_multipart_uploads(Bucket="bkt").get("Uploads", []) == []


def test_an_upload_of_another_key_is_left_alone(s3: Any, tmp_path: Path) -> None:
    other = s3.create_multipart_upload(Bucket="bkt", Key="proj/out/x/big.bin.other")
    body = b"x" * (6 * 2**20)
    local = tmp_path / "big.bin"
    local.write_bytes(body)
    store(LosesFirstCreateAnswer(s3)).put_file(local, "proj/out/x/big.bin",
                                               hashlib.sha256(body).hexdigest())
    left = s3.list_multipart_uploads(Bucket="bkt").get("Uploads", [])
    assert [u["UploadId"] for u in left] == [other["UploadId"]]


def test_a_create_botocore_retried_itself_leaves_no_upload_behind(s3: Any,
                                                                   tmp_path: Path) -> None:
    body = b"y" * (6 * 2**20)
    local = tmp_path / "big.bin"
    local.write_bytes(body)
    inside = RetriesLostCreateInside(s3)
    store(inside).put_file(local, "proj/out/x/big.bin", hashlib.sha256(body).hexdigest())
    assert inside.creates == 1
    assert s3.list_multipart_uploads(Bucket="bkt").get("Uploads", []) == []
