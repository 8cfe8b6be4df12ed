"""What a failed output commit or stage-in says in the run's failure sample: the
storage's own error, and, for the three a user's setup causes, what to check (a pod with
no S3 credentials; keys the store does not accept; an identity the bucket refuses). A
pod with no credentials is not retried within the operation: nothing will change before
the next try. Keys a delete refuses one by one are an error too."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from nightshift.aws.s3store import DeleteRefusedError, S3Store, is_retryable
from nightshift.pipelinerun.samples import OWN_LINE_LIMIT
from nightshift.runner.config import StorageConfig
from nightshift.runner.storageerr import INPUTS_NEED, RECORDS_NEED, SAID_LIMIT, storage_error


def _client_error(code: str, status: int, message: str) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": message},
                     "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "ListMultipartUploads")


def test_no_credentials_names_the_two_ways_to_give_them() -> None:
    said = storage_error(NoCredentialsError())
    assert said == ("NoCredentialsError: Unable to locate credentials; the pod has no S3 "
                    "credentials: set the storage's credentialsSecret (spec.storage[].s3), "
                    "or the stage's serviceAccountName with an IAM role")
    assert not is_retryable(NoCredentialsError())


def test_a_refused_identity_names_the_permissions_the_outputs_need() -> None:
    said = storage_error(_client_error("AccessDenied", 403, "refused"))
    assert said == (
        "ClientError: An error occurred (AccessDenied) when calling the ListMultipartUploads "
        "operation: refused; the pod's S3 identity is refused: the outputs need "
        "s3:ListBucket and s3:ListBucketMultipartUploads on the bucket, and s3:GetObject, "
        "s3:PutObject, s3:DeleteObject and s3:AbortMultipartUpload under their prefix"), said
    # The inputs need less.
    said = storage_error(_client_error("AccessDenied", 403, "refused"), INPUTS_NEED)
    assert said.endswith("the pod's S3 identity is refused: the inputs need s3:ListBucket "
                         "on the bucket and s3:GetObject under their prefix"), said


def test_a_long_refusal_is_cut_before_the_fix_never_after() -> None:
    """AWS's AccessDenied names the role's ARN and the key: the store's words are cut so
    that a stage-in line naming a deep key still ends with the grant in the sample."""
    arn = "arn:aws:sts::123456789012:assumed-role/" + "r" * 64 + "/botocore-session-1"
    key = f"{'b' * 63}/survey-2026/_nightshift/{'r' * 63}/calibrate/12345.json"
    words = (f"User: {arn} is not authorized to perform: s3:PutObject on resource: "
             f"\"arn:aws:s3:::{key}\" because no identity-based policy allows the "
             "s3:PutObject action")
    said = storage_error(_client_error("AccessDenied", 403, words), RECORDS_NEED)
    cut, fix = said.split("; ", 1)
    assert len(cut) == SAID_LIMIT and cut.endswith("…"), cut
    assert fix == f"the pod's S3 identity is refused: {RECORDS_NEED}"
    line = f"stage-in failed (exit 1): archive (data: s3://{key}): task record not " \
           f"written: {said}"  # key: the bucket (63 characters, S3's most) and the key
    assert len(line) <= OWN_LINE_LIMIT, len(line)


def test_keys_the_store_does_not_accept_point_at_the_secret_not_at_permissions() -> None:
    for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
        said = storage_error(_client_error(code, 403, "refused"))
        assert said.endswith(
            "; the store does not accept the pod's S3 keys: check AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY in the storage's credentialsSecret (spec.storage[].s3) "
            "and its endpoint and region"), said
        assert "s3:ListBucket" not in said


def test_temporary_credentials_the_store_refuses_point_at_the_role() -> None:
    # IRSA or Pod Identity: there may be no Secret at all.
    said = storage_error(_client_error("ExpiredToken", 400, "expired"))
    assert said.endswith("; the pod's temporary S3 credentials expired or are not valid: "
                         "check the IAM role of the stage's serviceAccountName (IRSA or Pod "
                         "Identity)"), said


def test_a_delete_the_store_refuses_key_by_key_is_an_error() -> None:
    # DeleteObjects answers 200 with the keys it refused (Quiet mode lists only those).
    refused = DeleteRefusedError("b", [{"Key": "p/_SUCCESS", "Code": "AccessDenied",
                                        "Message": "Access Denied"}], 3)
    assert str(refused) == ("s3://b: 1 of 3 keys not deleted; the first, p/_SUCCESS: "
                            "AccessDenied: Access Denied")
    assert not is_retryable(refused)
    assert is_retryable(DeleteRefusedError("b", [{"Key": "k", "Code": "SlowDown"}], 1))
    assert storage_error(refused).endswith("s3:AbortMultipartUpload under their prefix")
    # A key long enough to push the code past the cut of the store's words: still named.
    long_key = "p/" + "k" * 400
    said = storage_error(DeleteRefusedError("b", [{"Key": long_key, "Code": "AccessDenied",
                                                   "Message": "Access Denied"}], 1))
    assert said.endswith("s3:AbortMultipartUpload under their prefix"), said
    assert said.split("; the pod's S3 identity", 1)[0].endswith("…"), said


def test_other_errors_are_the_storages_own_words() -> None:
    said = storage_error(_client_error("NoSuchBucket", 404, "The specified bucket does not "
                                       "exist"))
    assert said == ("ClientError: An error occurred (NoSuchBucket) when calling the "
                    "ListMultipartUploads operation: The specified bucket does not exist")
    said = storage_error(EndpointConnectionError(endpoint_url="http://s3.local:9000"))
    assert said == ('EndpointConnectionError: Could not connect to the endpoint URL: '
                    '"http://s3.local:9000"')
    assert is_retryable(EndpointConnectionError(endpoint_url="http://s3.local:9000"))


def test_s3store_delete_raises_what_the_store_refused() -> None:
    class Refusing:
        def delete_objects(self, **kw: Any) -> dict[str, Any]:
            keys = [o["Key"] for o in kw["Delete"]["Objects"]]
            return {"Errors": [{"Key": keys[0], "Code": "AccessDenied",
                                "Message": "Access Denied"}]}

    store = S3Store(StorageConfig(name="data", kind="s3", bucket="b", prefix="p/"),
                    Refusing())  # type: ignore[arg-type]
    with pytest.raises(DeleteRefusedError, match="1 of 2 keys not deleted; the first, "
                       "p/_SUCCESS: AccessDenied"):
        store.delete(["p/_SUCCESS", "p/x"])


def test_a_mounted_storage_refusing_the_pods_user_names_the_fix_and_is_not_retried() -> None:
    import errno

    e = PermissionError(errno.EACCES, "Permission denied", "/nightshift/storage/nfs/out")
    said = storage_error(e)
    assert said.startswith("PermissionError: [Errno 13] Permission denied: "
                           "'/nightshift/storage/nfs/out'; the file system refuses the pod's "
                           "user (the stage's runAsUser and runAsGroup"), said
    assert "set spec.stages[].runAsUser and runAsGroup to its owner" in said
    assert not is_retryable(e)
    ro = OSError(errno.EROFS, "Read-only file system", "/nightshift/storage/nfs/out")
    assert "a mounted storage is read-only here" in storage_error(ro)
    assert not is_retryable(ro)
    # The pod's own paths are not a storage's: no storage advice.
    own = PermissionError(errno.EACCES, "Permission denied", "/nightshift/work/outputs/x")
    assert storage_error(own) == ("PermissionError: [Errno 13] Permission denied: "
                                  "'/nightshift/work/outputs/x'")
    # A full disk still is (the next pod may land where there is room).
    assert is_retryable(OSError(errno.ENOSPC, "No space left on device"))
