"""S3 for the in-pod runner: the Store it stages from and commits to. It lives in aws/
because only aws/ talks to AWS; it implements the runner's Store protocol.

botocore retries throttling, timeouts and 5xx itself (adaptive mode also slows the
client down when S3 answers SlowDown). It does not retry a response body that breaks
mid-read, nor give up gracefully while a server restarts, so `retrying` wraps each whole
operation (request + body) once more.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)

from nightshift.runner.config import StorageConfig
from nightshift.runner.store import (
    META_SHA256,
    ChecksumError,
    ContainmentError,
    ObjectInfo,
    key_problem,
)

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
else:
    S3Client = Any

log = logging.getLogger(__name__)
T = TypeVar("T")

# Memory bound: commit holds up to FILE_THREADS x UPLOAD_THREADS parts in flight.
PART_SIZE = 16 * 2**20
MAX_PARTS = 9000  # S3 allows 10,000; keep a margin
MULTIPART_THRESHOLD = 32 * 2**20
UPLOAD_THREADS = 8
RETRYABLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
     "InternalError", "ServiceUnavailable", "503", "500", "502", "504"}
)


def client(storage: StorageConfig, env: dict[str, str] | None = None) -> S3Client:
    env = dict(os.environ) if env is None else env
    kwargs: dict[str, Any] = {}
    if storage.access_key_env and storage.secret_key_env:
        kwargs["aws_access_key_id"] = env.get(storage.access_key_env)
        kwargs["aws_secret_access_key"] = env.get(storage.secret_key_env)
    cfg = Config(
        retries={"mode": "adaptive", "max_attempts": 8},
        # Seconds; the env knobs exist for fault drills (a hung server found in seconds).
        connect_timeout=float(env.get("NIGHTSHIFT_S3_CONNECT_TIMEOUT") or 5),
        read_timeout=float(env.get("NIGHTSHIFT_S3_READ_TIMEOUT") or 60),
        max_pool_connections=64,
        # S3-compatible stores on an IP:port cannot serve virtual-hosted buckets.
        s3={"addressing_style": "path" if storage.endpoint else "auto"},
        # We send our own full-object SHA-256 (checked by the server) instead of
        # botocore's default CRC32 trailer, which some S3-compatible stores reject.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session(region_name=storage.region or env.get("AWS_REGION") or
                                    "us-east-1")
    return session.client("s3", endpoint_url=storage.endpoint, config=cfg, **kwargs)


def denied(err: BaseException) -> bool:
    """A local file system refused the pod's user (a mounted storage's owner or mode, a
    read-only mount): its setup, which no retry mends."""
    return isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def is_retryable(err: BaseException) -> bool:
    if isinstance(err, ClientError | DeleteRefusedError):
        status = http_status(err)
        return error_code(err) in RETRYABLE_CODES or status >= 500 or status == 429
    if no_credentials(err) or denied(err):
        return False  # the pod's setup, not a moment's fault: say so at once
    return isinstance(err, BotoCoreError | ConnectionError | TimeoutError | OSError)


def error_code(err: BaseException) -> str:
    """The S3 error code a ClientError (or a refused delete) came with; "" otherwise."""
    if isinstance(err, DeleteRefusedError):
        return err.code
    if not isinstance(err, ClientError):
        return ""
    return str(err.response.get("Error", {}).get("Code", ""))


class DeleteRefusedError(Exception):
    """DeleteObjects answered 200 but refused some keys (each with its own error)."""

    def __init__(self, bucket: str, errors: Sequence[Mapping[str, Any]], asked: int) -> None:
        first = errors[0]
        self.code = str(first.get("Code", ""))
        super().__init__(f"s3://{bucket}: {len(errors)} of {asked} keys not deleted; the "
                         f"first, {first.get('Key')}: {self.code}: {first.get('Message', '')}")


# What a storage operation raises for the storage's own reasons (its answer, the
# connection, credentials), for callers outside aws/ that add where it happened.
STORAGE_ERRORS: tuple[type[Exception], ...] = (ClientError, BotoCoreError, DeleteRefusedError)


def http_status(err: BaseException) -> int:
    """The HTTP status a ClientError came with; 0 for any other error."""
    if not isinstance(err, ClientError):
        return 0
    return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def no_credentials(err: BaseException) -> bool:
    """boto3 found no credentials (or half of them) where it looks."""
    return isinstance(err, NoCredentialsError | PartialCredentialsError)


def retrying(fn: Callable[[], T], what: str, attempts: int = 6, base: float = 0.5) -> T:
    """Full-jitter exponential backoff around a whole operation (request and body)."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except ChecksumError:
            raise
        except Exception as e:
            if attempt == attempts or not is_retryable(e):
                raise
            delay = random.uniform(0, min(20.0, base * 2**attempt))  # noqa: S311  (jitter, not a secret)
            log.warning("%s failed (%s), retry %d/%d in %.1fs", what, e, attempt, attempts, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def b64(hexdigest: str) -> str:
    return base64.b64encode(bytes.fromhex(hexdigest)).decode()


class S3Store:
    """One storage's bucket; every key it is handed must stay under the storage's prefix."""

    def __init__(self, storage: StorageConfig, s3: S3Client) -> None:
        self.name = storage.name
        self.bucket = storage.bucket
        self.prefix = storage.prefix
        # Where objects come from, for the node cache's key: the configured endpoint,
        # else the one boto3 chose (AWS's own).
        self.endpoint = storage.endpoint or str(
            getattr(getattr(s3, "meta", None), "endpoint_url", "") or "")
        self.s3 = s3

    def _check(self, *keys: str) -> None:
        for key in keys:
            problem = key_problem(self.prefix, key)
            if problem:
                raise ContainmentError(
                    f"storage {self.name!r}: key {key!r} {problem}; keys built from items "
                    f"must stay under the storage's prefix {self.prefix!r}")

    def ls(self, prefix: str) -> list[ObjectInfo]:
        self._check(prefix)

        def go() -> list[ObjectInfo]:
            out = []
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                for o in page.get("Contents", []):
                    out.append(ObjectInfo(o["Key"], o["Size"], o.get("ETag", "").strip('"')))
            return out

        return retrying(go, f"list s3://{self.bucket}/{prefix}")

    def head(self, key: str) -> ObjectInfo | None:
        self._check(key)

        def go() -> ObjectInfo | None:
            try:
                r = self.s3.head_object(Bucket=self.bucket, Key=key)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise
            return ObjectInfo(key, r["ContentLength"], r.get("ETag", "").strip('"'),
                              r.get("Metadata", {}).get(META_SHA256))

        return retrying(go, f"head s3://{self.bucket}/{key}")

    def get_range(self, key: str, start: int, end: int, etag: str) -> tuple[bytes, dict[str, str]]:
        """Bytes [start, end) of one version of an object (IfMatch pins the ETag)."""
        self._check(key)

        def go() -> tuple[bytes, dict[str, str]]:
            r = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}",
                                   IfMatch=f'"{etag}"')
            data = r["Body"].read()
            if len(data) != end - start:
                raise ConnectionError(f"short read {len(data)} of {end - start} bytes")
            return data, dict(r.get("Metadata", {}))

        return retrying(go, f"get s3://{self.bucket}/{key} [{start},{end})")

    def put_file(self, local: Path, key: str, sha256: str) -> ObjectInfo:
        self._check(key)
        size = local.stat().st_size
        meta = {META_SHA256: sha256}
        if size < MULTIPART_THRESHOLD:
            data = local.read_bytes()
            if hashlib.sha256(data).hexdigest() != sha256:
                raise ChecksumError(f"{local} changed while it was being committed")
            # The server checks ChecksumSHA256 and refuses a body damaged in transit.
            r = retrying(lambda: self.s3.put_object(
                Bucket=self.bucket, Key=key, Body=data, Metadata=meta,
                ChecksumSHA256=b64(sha256)), f"put s3://{self.bucket}/{key}")
            return ObjectInfo(key, size, r.get("ETag", "").strip('"'), sha256)
        return self._multipart(local, key, size, meta)

    def _multipart(self, local: Path, key: str, size: int, meta: dict[str, str]) -> ObjectInfo:
        creates = 0

        def create() -> Any:
            nonlocal creates
            creates += 1
            return self.s3.create_multipart_upload(
                Bucket=self.bucket, Key=key, Metadata=meta, ChecksumAlgorithm="SHA256")

        up = retrying(create, f"create multipart s3://{self.bucket}/{key}")
        upload_id = up["UploadId"]

        part_size = max(PART_SIZE, -(-size // MAX_PARTS))

        def part(n: int) -> dict[str, Any]:
            with local.open("rb") as f:
                f.seek((n - 1) * part_size)
                data = f.read(part_size)
            digest = b64(hashlib.sha256(data).hexdigest())
            r = retrying(lambda: self.s3.upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=data,
                ChecksumSHA256=digest), f"upload part {n} of s3://{self.bucket}/{key}")
            return {"PartNumber": n, "ETag": r["ETag"], "ChecksumSHA256": digest}

        nparts = max(1, -(-size // part_size))
        try:
            with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
                parts = list(pool.map(part, range(1, nparts + 1)))
            r = retrying(lambda: self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": parts}),  # type: ignore[typeddict-item]
                f"complete multipart s3://{self.bucket}/{key}")
        except BaseException:
            try:
                self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception as e:  # the next attempt's abort_uploads sweeps it
                log.warning("abort multipart %s: %s", key, e)
            raise
        if creates > 1 or up.get("ResponseMetadata", {}).get("RetryAttempts", 0):
            # A create whose answer was lost (the server died after making it) left an
            # upload nobody will complete; parts of it would be billed until swept. The
            # retry that made a second may be ours or botocore's own (RetryAttempts).
            self._abort_others(key, upload_id)
        return ObjectInfo(key, size, r.get("ETag", "").strip('"'), meta[META_SHA256])

    def _abort_others(self, key: str, keep: str) -> None:
        try:
            pages = self.s3.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=key)
            for page in pages:
                for u in page.get("Uploads", []):
                    if u["Key"] == key and u["UploadId"] != keep:
                        self.s3.abort_multipart_upload(
                            Bucket=self.bucket, Key=key, UploadId=u["UploadId"])
        except Exception as e:  # the item's next attempt sweeps its prefix
            log.warning("abort lost multipart uploads of %s: %s", key, e)

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/json") -> None:
        self._check(key)
        digest = hashlib.sha256(data).hexdigest()
        retrying(lambda: self.s3.put_object(
            Bucket=self.bucket, Key=key, Body=data, ContentType=content_type,
            Metadata={META_SHA256: digest}, ChecksumSHA256=b64(digest)),
            f"put s3://{self.bucket}/{key}")

    def get_bytes(self, key: str) -> bytes | None:
        self._check(key)

        def go() -> bytes | None:
            try:
                return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise

        return retrying(go, f"get s3://{self.bucket}/{key}")

    def delete(self, keys: list[str]) -> None:
        self._check(*keys)
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            retrying(lambda b=batch: self._delete_batch(b),  # type: ignore[misc]
                     f"delete {len(batch)} keys in s3://{self.bucket}")

    def _delete_batch(self, batch: list[Any]) -> None:
        # Quiet: the answer lists only the keys it refused (AccessDenied, Object Lock),
        # in a 200 response; ignoring them would leave a stale manifest or partial
        # outputs with nothing said.
        out = self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch,
                                                                 "Quiet": True})
        if out.get("Errors"):
            raise DeleteRefusedError(self.bucket, out["Errors"], len(batch))

    def abort_uploads(self, prefix: str) -> int:
        """Abort multipart uploads a killed earlier attempt left under the item's prefix."""
        self._check(prefix)

        def go() -> int:
            n = 0
            pages = self.s3.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                for u in page.get("Uploads", []):
                    self.s3.abort_multipart_upload(
                        Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"])
                    n += 1
            return n

        return retrying(go, f"abort uploads under s3://{self.bucket}/{prefix}")
