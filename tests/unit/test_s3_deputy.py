"""fromS3 listings: the run's credentials, at allowed endpoints (issue 14: confused deputy).

The operator lists a stage's items itself. Without a credentials Secret, boto3 falls
back to the operator's own identity, so a tenant could have the operator list any
bucket that identity can read, and make it send requests to any URL. The operator now
lists only with the run's Secret (or, where the admin allows it, its own identity) and
only at endpoints the admin allows.
"""

from __future__ import annotations

import base64
from typing import Any, cast

import pytest

from nightshift.aws.s3 import S3Target
from nightshift.config import OperatorConfig
from nightshift.kube import Kube
from nightshift.pipelinerun import itemsource
from nightshift.pipelinerun.itemsource import ResolveError, resolve_and_freeze
from tests.bad_pipelineruns import run, stage

ENV_ENDPOINTS = "NIGHTSHIFT_S3_ENDPOINTS"
ENV_IDENTITY = "NIGHTSHIFT_S3_OPERATOR_IDENTITY"


class FakeKube:
    def __init__(self, secrets: dict[str, dict[str, str]] | None = None) -> None:
        self.secrets = secrets or {}
        self.applied: list[dict[str, Any]] = []

    def get(self, api: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        if kind == "Secret" and name in self.secrets:
            return {"data": {k: base64.b64encode(v.encode()).decode()
                             for k, v in self.secrets[name].items()}}
        return None

    def apply(self, obj: dict[str, Any]) -> None:
        self.applied.append(obj)

    def list_metadata(self, *_a: Any, **_kw: Any) -> list[dict[str, Any]]:
        return []  # no chunk of an earlier freeze


KEYS = {"AWS_ACCESS_KEY_ID": "AKIDTENANT", "AWS_SECRET_ACCESS_KEY": "tenant-secret"}


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> list[S3Target]:
    """Every listing the operator would make, and what it would answer."""
    calls: list[S3Target] = []

    def fake_list(target: S3Target, prefix: str, suffix: str = "") -> list[str]:
        calls.append(target)
        return [f"{prefix}0001.fits"]

    monkeypatch.setattr(itemsource, "list_keys", fake_list)
    monkeypatch.delenv(ENV_ENDPOINTS, raising=False)
    monkeypatch.delenv(ENV_IDENTITY, raising=False)
    return calls


def freeze(kube: FakeKube, run: dict[str, Any]) -> None:
    """What reconcile does when the stage is about to start."""
    resolve_and_freeze(cast(Kube, kube), run, "reduce")


def s3_run(**s3: Any) -> dict[str, Any]:
    m = run([stage("reduce", forEach={"fromS3": {"storage": "raw", "prefix": "nights/"}})],
            storage=[{"name": "raw", "s3": {"bucket": "someone-elses-bucket", **s3}}])
    m["metadata"]["uid"] = "u1"
    return m


# --- through the operator's real entry point (reconcile calls resolve_and_freeze) ----------

def test_no_secret_does_not_list_with_the_operators_identity(listed: list[S3Target]) -> None:
    with pytest.raises(ResolveError) as err:
        freeze(FakeKube(), s3_run())
    msg = str(err.value)
    assert msg.startswith("spec.stages[0].forEach.fromS3.storage")
    assert "credentialsSecret" in msg and ENV_IDENTITY in msg
    assert listed == [] and not err.value.invalid


def test_an_endpoint_the_admin_did_not_allow_is_never_contacted(listed: list[S3Target]) -> None:
    kube = FakeKube({"s3": KEYS})
    with pytest.raises(ResolveError) as err:
        freeze(kube, s3_run(endpoint="http://169.254.169.254", credentialsSecret="s3"))
    msg = str(err.value)
    assert msg.startswith("spec.stages[0].forEach.fromS3.storage")
    assert "http://169.254.169.254" in msg and ENV_ENDPOINTS in msg
    assert "spec.storage[0].s3.endpoint" in msg
    assert listed == []


def test_a_secret_without_keys_does_not_fall_back_to_the_operator(
        listed: list[S3Target]) -> None:
    kube = FakeKube({"s3": {"AWS_ACCESS_KEY_ID": "AKIDTENANT"}})
    with pytest.raises(ResolveError, match="AWS_SECRET_ACCESS_KEY"):
        freeze(kube, s3_run(credentialsSecret="s3"))
    assert listed == []


def test_the_runs_secret_is_used(listed: list[S3Target],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_IDENTITY, "true")  # a Secret wins even where identity is allowed
    kube = FakeKube({"s3": KEYS})
    freeze(kube, s3_run(credentialsSecret="s3"))
    assert [(t.access_key, t.secret_key, t.operator_identity) for t in listed] == [
        ("AKIDTENANT", "tenant-secret", False)]
    assert kube.applied  # the items were frozen


def test_allowed_endpoint_with_secret_is_listed(listed: list[S3Target],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_ENDPOINTS, "https://minio.internal:9000, http://127.0.0.1:*")
    kube = FakeKube({"s3": KEYS})
    freeze(kube, s3_run(endpoint="http://127.0.0.1:41234", credentialsSecret="s3"))
    assert [t.endpoint for t in listed] == ["http://127.0.0.1:41234"]


def test_operator_identity_when_the_admin_allows_it(listed: list[S3Target],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_IDENTITY, "true")
    freeze(FakeKube(), s3_run())
    assert [(t.access_key, t.endpoint, t.operator_identity) for t in listed] == [
        (None, None, True)]


def test_the_s3_client_itself_refuses_to_sign_as_the_operator_unasked() -> None:
    # Defence in depth: a caller that forgets the decision still gets no listing.
    from nightshift.aws.s3 import S3Error, list_keys

    with pytest.raises(S3Error, match="no credentials"):
        list_keys(S3Target(bucket="someone-elses-bucket"), "")


def test_operator_identity_never_goes_to_a_custom_endpoint_not_allowed(
        listed: list[S3Target], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_IDENTITY, "true")
    with pytest.raises(ResolveError, match=ENV_ENDPOINTS):
        freeze(FakeKube(), s3_run(endpoint="https://evil.example"))
    assert listed == []


# --- the decision, as a pure function -----------------------------------------------------

def cfg(endpoints: tuple[str, ...] = (), identity: bool = False) -> dict[str, Any]:
    return {"s3_endpoints": endpoints, "s3_operator_identity": identity}


FIELD = "spec.stages[0].forEach.fromS3.storage"


@pytest.mark.parametrize(("endpoint", "secret", "config", "refused_for"), [
    (None, "s3", cfg(), None),
    (None, None, cfg(), "NIGHTSHIFT_S3_OPERATOR_IDENTITY"),
    (None, None, cfg(identity=True), None),
    ("http://127.0.0.1:9000", "s3", cfg(), "NIGHTSHIFT_S3_ENDPOINTS"),
    ("http://127.0.0.1:9000", "s3", cfg(("http://127.0.0.1:9000",)), None),
    ("http://127.0.0.1:9000/", "s3", cfg(("http://127.0.0.1:9000",)), None),
    ("HTTP://LocalHost:9000", "s3", cfg(("http://localhost:9000/",)), None),
    ("https://minio.internal", "s3", cfg(("https://minio.internal:443",)), None),
    ("http://127.0.0.1:9001", "s3", cfg(("http://127.0.0.1:9000",)), "NIGHTSHIFT_S3_ENDPOINTS"),
    ("https://127.0.0.1:9000", "s3", cfg(("http://127.0.0.1:9000",)), "NIGHTSHIFT_S3_ENDPOINTS"),
    ("http://127.0.0.1:5555", "s3", cfg(("http://127.0.0.1:*",)), None),
    ("http://127.0.0.2:5555", "s3", cfg(("http://127.0.0.1:*",)), "NIGHTSHIFT_S3_ENDPOINTS"),
    # Userinfo makes a URL look like an allowed host while going elsewhere.
    ("http://127.0.0.1:9000@evil.example", "s3", cfg(("http://127.0.0.1:9000",)),
     "NIGHTSHIFT_S3_ENDPOINTS"),
    ("http://evil.example#@127.0.0.1:9000", "s3", cfg(("http://127.0.0.1:9000",)),
     "NIGHTSHIFT_S3_ENDPOINTS"),
    ("http://127.0.0.1:9000.evil.example", "s3", cfg(("http://127.0.0.1:*",)),
     "NIGHTSHIFT_S3_ENDPOINTS"),
    ("http://127.0.0.1:9000/other-path", "s3", cfg(("http://127.0.0.1:9000",)),
     "NIGHTSHIFT_S3_ENDPOINTS"),
    ("file:///etc/passwd", "s3", cfg(("file:///etc/passwd",)), "NIGHTSHIFT_S3_ENDPOINTS"),
    ("", "s3", cfg(), None),  # empty: AWS's own endpoint
    # The endpoint is checked first: identity permission does not open other URLs.
    ("https://evil.example", None, cfg(identity=True), "NIGHTSHIFT_S3_ENDPOINTS"),
])
def test_listing_decision(endpoint: str | None, secret: str | None, config: dict[str, Any],
                          refused_for: str | None) -> None:
    from nightshift.pipelinerun.itemsource import s3_listing_refusal

    got = s3_listing_refusal(FIELD, "raw", "spec.storage[0].s3", endpoint, secret,
                             OperatorConfig(**config))
    if refused_for is None:
        assert got is None
    else:
        assert got is not None and got.startswith(FIELD) and refused_for in got


def test_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_ENDPOINTS, raising=False)
    monkeypatch.delenv(ENV_IDENTITY, raising=False)
    c = OperatorConfig.from_env()
    assert c.s3_endpoints == () and c.s3_operator_identity is False
    monkeypatch.setenv(ENV_ENDPOINTS, " http://127.0.0.1:*, ,https://minio:9000 ")
    monkeypatch.setenv(ENV_IDENTITY, "True")
    c = OperatorConfig.from_env()
    assert c.s3_endpoints == ("http://127.0.0.1:*", "https://minio:9000")
    assert c.s3_operator_identity is True


@pytest.mark.parametrize(("name", "value"), [
    (ENV_ENDPOINTS, "minio:9000"), (ENV_ENDPOINTS, "ftp://x"),
    (ENV_ENDPOINTS, "http://u:p@host"), (ENV_IDENTITY, "maybe"),
])
def test_config_refuses_what_it_cannot_mean(monkeypatch: pytest.MonkeyPatch, name: str,
                                            value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        OperatorConfig.from_env()
