"""What a failed output commit says in the run's failure sample: the storage's own error,
and, for the two a user's setup causes, what to check (a pod with no S3 credentials; an
identity the bucket refuses). A pod with no credentials is not retried within the
operation: nothing will change before the next try."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from nightshift.aws.s3store import is_retryable
from nightshift.runner.commit import storage_error


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
    for code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        said = storage_error(_client_error(code, 403, "refused"))
        assert said.startswith(f"ClientError: An error occurred ({code}) when calling the "
                               "ListMultipartUploads operation: refused; the pod's S3 "
                               "identity is refused: the outputs need s3:ListBucket"), said


def test_other_errors_are_the_storages_own_words() -> None:
    said = storage_error(_client_error("NoSuchBucket", 404, "The specified bucket does not "
                                       "exist"))
    assert said == ("ClientError: An error occurred (NoSuchBucket) when calling the "
                    "ListMultipartUploads operation: The specified bucket does not exist")
    said = storage_error(EndpointConnectionError(endpoint_url="http://s3.local:9000"))
    assert said == ('EndpointConnectionError: Could not connect to the endpoint URL: '
                    '"http://s3.local:9000"')
    assert is_retryable(EndpointConnectionError(endpoint_url="http://s3.local:9000"))
