"""An s3 SharedStorage's credentialsSecret is checked as a run's item listing checks it
(api/credsecret.py): missing, or without one of its keys, the storage is not Ready and
says which and how to mend it. Before, it said Ready, and only each run that used it
said what was wrong. A Secret the operator may not read is not judged."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from nightshift.kube import KubeError
from nightshift.sharedstorage.observe import Sources, SquidSampler, observe
from nightshift.sharedstorage.plan import plan
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_sharedstorage_plan import cond, storage


def _secret(**keys: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s3-keys", "namespace": "physics"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in keys.items()}}


def _ready(kube: RecordingKube) -> dict[str, Any]:
    obj = storage("s3")
    kube.put(obj)
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), "physics",
                  obj["metadata"]["name"], datetime.now(UTC))
    assert got is not None
    status = plan(got).status
    assert status is not None
    return cond(status, "Ready")


@pytest.mark.parametrize("secret, said", [
    (None, "spec.s3.credentialsSecret: Secret s3-keys does not exist (it needs "
           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"),
    (_secret(AWS_ACCESS_KEY_ID="AKIA"), "spec.s3.credentialsSecret: Secret s3-keys has no "
                                        "AWS_SECRET_ACCESS_KEY; add the key to the Secret"),
])
def test_a_missing_secret_or_key_is_named(secret: dict[str, Any] | None, said: str) -> None:
    ready = _ready(RecordingKube([secret] if secret else []))
    assert ready["status"] == "False" and said in ready["message"], ready


def test_a_secret_with_both_keys_is_ready() -> None:
    ready = _ready(RecordingKube([_secret(AWS_ACCESS_KEY_ID="AKIA",
                                          AWS_SECRET_ACCESS_KEY="s")]))
    assert ready["status"] == "True", ready


def test_a_secret_the_operator_may_not_read_is_not_judged() -> None:
    class Forbidden(RecordingKube):
        def get(self, api_version: str, kind: str, name: str,
                namespace: str | None = None) -> dict[str, Any] | None:
            if kind == "Secret":
                raise KubeError(403, "Forbidden", "secrets is forbidden")
            return super().get(api_version, kind, name, namespace)

    assert _ready(Forbidden())["status"] == "True"
