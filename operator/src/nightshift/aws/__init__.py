"""The only package that talks to AWS (boto3): narrow wrappers with typed errors.

Callers never see botocore exceptions: every AWS failure becomes an AwsError carrying
the AWS error code and message, which the reconcilers turn into a condition instead
of a crash loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError


class AwsError(Exception):
    """An AWS call failed. `code` is AWS's error code ("UnauthorizedOperation", ...)."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"{operation}: {code}: {message}")
        self.operation = operation
        self.code = code
        self.message = message


@contextmanager
def aws_errors(operation: str) -> Iterator[None]:
    """Re-raise botocore's errors as AwsError for `operation`."""
    try:
        yield
    except ClientError as e:
        err = e.response.get("Error", {})
        raise AwsError(
            operation, str(err.get("Code", "Unknown")), str(err.get("Message", e))
        ) from e
    except BotoCoreError as e:
        # No response from AWS at all: credentials, endpoint, network.
        raise AwsError(operation, type(e).__name__, str(e)) from e


__all__ = ["AwsError", "aws_errors"]
