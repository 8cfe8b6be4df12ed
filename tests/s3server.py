"""A real S3-compatible server (versitygw, posix backend) on a free loopback port.

Usable from pytest (the `s3server` fixture: import it into a test module, or list this
module in `pytest_plugins`) and from plain scripts (bench/datapath.py): `VersityGW` has
start/stop/kill/restart so fault tests can take the server away mid-transfer.

The binary is built by the Makefile (hack/build-upstream.sh) into
$NIGHTSHIFT_CACHE/bin/versitygw-v1.8.0/versitygw (default ~/.cache/nightshift).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config

from nightshift_localcluster.procs import free_port

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
else:
    S3Client = Any

VERSION = "v1.8.0"


def binary() -> Path:
    cache = Path(os.environ.get("NIGHTSHIFT_CACHE") or Path.home() / ".cache" / "nightshift")
    return cache / "bin" / f"versitygw-{VERSION}" / "versitygw"


class VersityGW:
    def __init__(self, data_dir: Path, log_dir: Path | None = None,
                 host: str = "127.0.0.1", users: tuple[str, ...] = ()) -> None:
        # host: where it listens; pods on the local cluster's real node need the bridge's
        # gateway address (tests/integration/test_real_node.py).
        self.host = host
        self.data_dir = data_dir
        self.log_path = (log_dir or data_dir.parent) / "versitygw.log"
        self.port = free_port(host)
        self.access_key = "nightshift"
        self.secret_key = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None
        # Accounts besides the root one (role "user": only what a bucket policy grants
        # them), each with its own secret: an identity a policy can refuse, as IAM would.
        self.users = {u: secrets.token_hex(16) for u in users}

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        exe = binary()
        if not exe.exists():
            raise FileNotFoundError(exe)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        iam: list[str] = []
        if self.users:
            # versitygw's internal IAM store (auth/iam_internal.go): accessAccounts by key.
            iam_dir = self.data_dir.parent / "iam"
            iam_dir.mkdir(exist_ok=True)
            (iam_dir / "users.json").write_text(json.dumps({"accessAccounts": {
                u: {"access": u, "secret": k, "role": "user", "userID": 0, "groupID": 0,
                    "projectID": 0} for u, k in self.users.items()}}))
            iam = ["--iam-dir", str(iam_dir)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [str(exe), "--port", f"{self.host}:{self.port}", "--access", self.access_key,
             "--secret", self.secret_key, *iam, "posix", str(self.data_dir)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"versitygw exited {self.proc.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"versitygw not listening on {self.port}; log {self.log_path}")

    def kill(self) -> None:
        """Abrupt loss (SIGKILL), as a crashed or partitioned server looks to a client."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.kill()
        self.start()

    def client(self, user: str | None = None, **config: Any) -> S3Client:
        """A client as the root account, or as `user` (one of `users`)."""
        cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}, **config)
        access, secret = (user, self.users[user]) if user else (self.access_key,
                                                                 self.secret_key)
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=access, aws_secret_access_key=secret, config=cfg)

    def deny(self, bucket: str, user: str, action: str, prefix: str) -> None:
        """Let `user` do anything in `bucket` but `action` on keys under `prefix`: an
        explicit Deny, as an IAM policy missing one grant looks to the pod."""
        self.client().put_bucket_policy(Bucket=bucket, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": [user]}, "Action": ["s3:*"],
                 "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]},
                {"Effect": "Deny", "Principal": {"AWS": [user]}, "Action": [action],
                 "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*"]}]}))

    def storage_json(self, name: str, bucket: str, prefix: str = "") -> dict[str, Any]:
        """A storage entry of NIGHTSHIFT_RUNNER_CONFIG pointing at this server."""
        return {"kind": "s3", "bucket": bucket, "prefix": prefix, "endpoint": self.endpoint,
                "region": "us-east-1", "accessKeyEnv": f"TEST_{name.upper()}_AK",
                "secretKeyEnv": f"TEST_{name.upper()}_SK"}

    def credentials_env(self, name: str, user: str | None = None) -> dict[str, str]:
        access, secret = (user, self.users[user]) if user else (self.access_key,
                                                                 self.secret_key)
        return {f"TEST_{name.upper()}_AK": access, f"TEST_{name.upper()}_SK": secret}

    def object_path(self, bucket: str, key: str) -> Path:
        """Where the posix backend keeps an object's bytes (for corruption tests)."""
        return self.data_dir / bucket / key


@contextlib.contextmanager
def running(host: str = "127.0.0.1", users: tuple[str, ...] = ()) -> Iterator[VersityGW]:
    """A started server in a temporary directory, stopped after; skips the test when the
    binary is not built. What fails inside prints the server's log."""
    if not binary().exists():
        pytest.skip(f"versitygw {VERSION} not built at {binary()}: run `make test` (the "
                    "Makefile builds it) or hack/build-upstream.sh")
    with tempfile.TemporaryDirectory(prefix="nightshift-s3-") as d:
        gw = VersityGW(Path(d) / "data", Path(d), host=host, users=users)
        gw.start()
        try:
            yield gw
        except BaseException:
            print(f"versitygw log:\n{gw.log_path.read_text()[-4000:]}")
            raise
        finally:
            gw.stop()


@pytest.fixture
def s3server() -> Iterator[VersityGW]:
    with running() as gw:
        yield gw
