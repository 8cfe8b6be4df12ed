"""S3 calls the operator makes (listing a stage's items); the runner has its own data path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError


class S3Error(Exception):
    """An S3 failure with the service's code and message, for a condition or an event."""


@dataclass(frozen=True)
class S3Target:
    bucket: str
    region: str | None = None
    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    # Without keys boto3 signs with the operator's own identity: only when the caller
    # decided the operator's configuration allows it (pipelinerun/itemsource.py).
    operator_identity: bool = False


def client(target: S3Target) -> Any:
    if not (target.access_key and target.secret_key) and not target.operator_identity:
        raise S3Error(f"no credentials for s3://{target.bucket}, and the operator's own "
                      "identity was not allowed for it")
    cfg = Config(retries={"max_attempts": 8, "mode": "adaptive"}, connect_timeout=5,
                 read_timeout=30, s3={"addressing_style": "path"} if target.endpoint else None)
    return boto3.client(
        "s3", region_name=target.region or "us-east-1", endpoint_url=target.endpoint,
        aws_access_key_id=target.access_key, aws_secret_access_key=target.secret_key,
        config=cfg,
    )


class S3TooManyError(S3Error):
    """A listing longer than the caller will take."""


def list_keys(target: S3Target, prefix: str, suffix: str = "", limit: int = 500_000
              ) -> list[str]:
    """Every key under prefix (ending with suffix), in S3's (lexicographic) order."""
    keys: list[str] = []
    try:
        # In the try: boto3 refuses a malformed region here (InvalidRegionError).
        s3 = client(target)
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"]
                if key.endswith(suffix) and not key.endswith("/"):
                    keys.append(key)
                    if len(keys) > limit:
                        raise S3TooManyError(f"more than {limit} objects under "
                                             f"s3://{target.bucket}/{prefix}")
    except ClientError as e:
        err = e.response.get("Error", {})
        raise S3Error(f"listing s3://{target.bucket}/{prefix}: {err.get('Code')}: "
                      f"{err.get('Message')}") from None
    except BotoCoreError as e:
        raise S3Error(f"listing s3://{target.bucket}/{prefix}: {e}") from None
    return keys


class S3MissingError(S3Error):
    """The object (or its bucket) does not exist: it may still be written."""


class S3TooLargeError(S3Error):
    """The object is larger than the caller will read."""


def read_object(target: S3Target, key: str, max_bytes: int) -> bytes:
    """One object's bytes, refused above max_bytes (checked before the body is read)."""
    where = f"s3://{target.bucket}/{key}"
    try:
        s3 = client(target)
        obj = s3.get_object(Bucket=target.bucket, Key=key)
        size = int(obj.get("ContentLength") or 0)
        if size > max_bytes:
            obj["Body"].close()
            raise S3TooLargeError(f"{where} has {size} bytes, more than the {max_bytes} an item "
                          "list may have")
        data: bytes = obj["Body"].read(max_bytes + 1)
    except ClientError as e:
        err = e.response.get("Error", {})
        code = str(err.get("Code"))
        if code in ("NoSuchKey", "NoSuchBucket", "404"):
            raise S3MissingError(f"reading {where}: {code}: the object does not exist") from None
        raise S3Error(f"reading {where}: {code}: {err.get('Message')}") from None
    except BotoCoreError as e:
        raise S3Error(f"reading {where}: {e}") from None
    if len(data) > max_bytes:
        raise S3TooLargeError(f"{where} has more than the {max_bytes} bytes an item list may have")
    return data
