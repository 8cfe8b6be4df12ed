"""forEach.fromFile: one item per non-empty line of one S3 object (moto's S3), read with
the run's own credentials like a fromS3 listing; and the gathered stage's size check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import boto3
import pytest
from moto import mock_aws

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.pipelinerun import items as render_items
from nightshift.pipelinerun.itemsource import ResolveError, resolve_and_freeze
from tests.bad_pipelineruns import run, stage
from tests.unit.test_s3_deputy import ENV_ENDPOINTS, ENV_IDENTITY, KEYS, FakeKube

BUCKET = "montage"


class ListingKube(FakeKube):
    """FakeKube that also lists the metadata of the ConfigMaps it was given."""

    def __init__(self, secrets: dict[str, dict[str, str]] | None = None,
                 configmaps: list[dict[str, Any]] | None = None) -> None:
        super().__init__(secrets)
        self.configmaps = configmaps or []

    def list_metadata(self, api: str, kind: str, namespace: str | None = None,
                      label_selector: str | None = None) -> list[dict[str, Any]]:
        return [{"metadata": cm["metadata"]} for cm in self.configmaps]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.delenv(ENV_ENDPOINTS, raising=False)
    monkeypatch.delenv(ENV_IDENTITY, raising=False)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1",
                              aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
        client.create_bucket(Bucket=BUCKET)
        yield client


def file_run(path: str = "tables/images.txt", secret: str | None = "keys",  # noqa: S107  (a Secret's name)
             prefix: str = "proj/") -> dict[str, Any]:
    s3: dict[str, Any] = {"bucket": BUCKET, "prefix": prefix}
    if secret:
        s3["credentialsSecret"] = secret
    m = run([stage("project", forEach={"fromFile": {"storage": "raw", "path": path}})],
            storage=[{"name": "raw", "s3": s3}])
    m["metadata"]["uid"] = "u1"
    return m


def frozen_items(kube: FakeKube) -> list[str]:
    [cm] = kube.applied
    return str(cm["data"][names.ITEMS_KEY]).splitlines()


def test_one_item_per_non_empty_line(s3: Any) -> None:
    body = "2mass-j-001.fits\r\n\n  2mass-j-002.fits  \n\n2mass j 003.fits\n"
    s3.put_object(Bucket=BUCKET, Key="proj/tables/images.txt", Body=body.encode())
    kube = FakeKube({"keys": KEYS})
    resolve_and_freeze(cast(Kube, kube), file_run(), "project")
    assert frozen_items(kube) == ["2mass-j-001.fits", "2mass-j-002.fits", "2mass j 003.fits"]


def test_a_missing_object_waits_like_a_failed_listing(s3: Any) -> None:
    with pytest.raises(ResolveError) as err:
        resolve_and_freeze(cast(Kube, FakeKube({"keys": KEYS})), file_run(), "project")
    assert not err.value.invalid  # may still be written: Progressing False ItemsUnresolved
    msg = str(err.value)
    assert msg.startswith("spec.stages[0].forEach.fromFile.path")
    assert f"s3://{BUCKET}/proj/tables/images.txt" in msg and "does not exist" in msg


def test_an_empty_object_is_invalid(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="proj/tables/images.txt", Body=b"\n  \n")
    with pytest.raises(ResolveError) as err:
        resolve_and_freeze(cast(Kube, FakeKube({"keys": KEYS})), file_run(), "project")
    assert err.value.invalid and "gives no items" in str(err.value)


def test_not_utf8_is_invalid(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="proj/t.txt", Body=b"\xff\xfe\n")
    with pytest.raises(ResolveError) as err:
        resolve_and_freeze(cast(Kube, FakeKube({"keys": KEYS})), file_run("t.txt"), "project")
    assert err.value.invalid and "not UTF-8" in str(err.value)


def test_too_large_is_invalid(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from nightshift.pipelinerun import itemsource
    monkeypatch.setattr(itemsource, "MAX_FILE_BYTES", 10)
    s3.put_object(Bucket=BUCKET, Key="proj/t.txt", Body=b"a\n" * 6)
    with pytest.raises(ResolveError) as err:
        resolve_and_freeze(cast(Kube, FakeKube({"keys": KEYS})), file_run("t.txt"), "project")
    assert err.value.invalid and "12 bytes" in str(err.value)


def test_never_read_with_the_operators_identity(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="proj/tables/images.txt", Body=b"x\n")
    with pytest.raises(ResolveError) as err:
        resolve_and_freeze(cast(Kube, FakeKube()), file_run(secret=None), "project")
    msg = str(err.value)
    assert msg.startswith("spec.stages[0].forEach.fromFile.storage")
    assert "credentialsSecret" in msg and ENV_IDENTITY in msg


def test_wrong_keys_are_an_s3_error_not_a_fallback(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="proj/tables/images.txt", Body=b"x\n")
    kube = FakeKube({"keys": {"AWS_ACCESS_KEY_ID": "A"}})
    with pytest.raises(ResolveError, match="has no AWS_SECRET_ACCESS_KEY"):
        resolve_and_freeze(cast(Kube, kube), file_run(), "project")


# --- inputs[].gather: the gathered stage's real size, once it is frozen -------------------

def gather_run(count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    m = run([stage("split", forEach={"fromConfigMap": {"name": "days"}}),
             stage("image", dependsOn=["split"], forEach={"items": ["a"]},
                   inputs=[{"storage": "raw", "path": "x/{gather}/", "gather": "split"}])],
            storage=[{"name": "raw", "s3": {"bucket": BUCKET}}])
    m["metadata"]["uid"] = "u1"
    ref = render_items.RunRef.of(m)
    return m, render_items.items_configmaps(ref, "split", [str(i) for i in range(count)],
                                            last_step="main")


def test_gathering_a_frozen_stage_of_10000_items() -> None:
    m, cms = gather_run(10_000)
    kube = ListingKube(configmaps=cms)
    resolve_and_freeze(cast(Kube, kube), m, "image")
    assert frozen_items(kube) == ["a"]


def test_gathering_more_than_10000_items_is_invalid_and_names_the_field() -> None:
    m, cms = gather_run(10_001)
    with pytest.raises(ResolveError) as err:
        resolve_and_freeze(cast(Kube, ListingKube(configmaps=cms)), m, "image")
    assert err.value.invalid
    assert str(err.value).startswith("spec.stages[1].inputs[0].gather: stage 'split' has "
                                     "10001 items")
