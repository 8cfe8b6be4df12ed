"""An s3 SharedStorage as the PipelineRun storage block the runner already reads. Pure.

S3 runs no workloads: the runner (stage-in through the node's whole-file cache, commit
with manifests) is the data path. A run that names this storage gets the same
StorageRef it would have written inline, plus the cache ceiling for the runner config.
"""

from __future__ import annotations

from dataclasses import dataclass

from nightshift.pipelinerun.spec import S3Storage, StorageRef
from nightshift.sharedstorage.objects import Storage
from nightshift.virtualcluster.catalog import parse_quantity


@dataclass(frozen=True)
class S3Binding:
    # spec.storage entry of a PipelineRun, named after the SharedStorage.
    storage: StorageRef
    # The runner config's cacheMaxBytes (its node cache ceiling).
    cache_max_bytes: int


def s3_binding(st: Storage) -> S3Binding:
    s3 = st.spec.s3
    if s3 is None:
        raise ValueError(f"SharedStorage {st.namespace}/{st.name} is not of type s3")
    ref = StorageRef(name=st.name, s3=S3Storage(
        bucket=s3.bucket, prefix=s3.prefix, region=s3.region, endpoint=s3.endpoint,
        credentials_secret=s3.credentials_secret))
    return S3Binding(storage=ref, cache_max_bytes=int(parse_quantity(s3.cache.size)))


def endpoint(st: Storage) -> str:
    s3 = st.spec.s3
    assert s3 is not None  # noqa: S101  (invariant for mypy: an s3 storage)
    return f"s3://{s3.bucket}/{s3.prefix}"
