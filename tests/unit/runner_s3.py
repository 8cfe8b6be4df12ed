"""The runner against an in-process S3 (moto): a bucket, a runner config, its stores.

Shared by the runner's unit tests of the commit protocol and of stage-in; the same
protocol against a real S3 server is tests/integration/test_runner_s3.py.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nightshift.aws.s3store import S3Store
from nightshift.runner.config import Paths, RunnerConfig
from nightshift.runner.store import DirStore

BUCKET = "runner-bucket"


def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An S3 client of a moto bucket; `yield from` it in a test module's fixture."""
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def config(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], stage: str = "s",
           archive: bool = False) -> RunnerConfig:
    return RunnerConfig.loads(json.dumps({
        "version": 1, "run": "r", "namespace": "ns", "stage": stage,
        "storages": {"data": {"kind": "s3", "bucket": BUCKET, "prefix": "proj/"}},
        "inputs": inputs, "outputs": outputs,
        "archive": {"storage": "data", "prefix": "_nightshift"} if archive else None}))


def stores(cfg: RunnerConfig, client: Any) -> dict[str, S3Store | DirStore]:
    return {n: S3Store(st, client) for n, st in cfg.storages.items()}


def keys(client: Any, prefix: str) -> set[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"] for p in pages for o in p.get("Contents", [])}


def get_json(client: Any, key: str) -> Any:
    return json.loads(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def write(root: Path, rel: str, data: bytes, settled: bool = False) -> Path:
    """A file a step wrote; `settled`: a minute ago, so interleave takes it at once."""
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    if settled:
        old = time.time() - 60
        os.utime(p, (old, old))
    return p


def staged(paths: Paths) -> list[str]:
    """What stage-in put under the item's inputs/, as sorted relative names."""
    return sorted(p.relative_to(paths.inputs).as_posix()
                  for p in paths.inputs.rglob("*") if p.is_file())
