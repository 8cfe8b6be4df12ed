"""Unit-test fixtures shared across modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber


@pytest.fixture
def ec2() -> Iterator[tuple[Any, Stubber]]:
    """A real EC2 client whose calls are checked against botocore's service model and
    answered by the test (moto lacks placement groups)."""
    client = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="k",
                          aws_secret_access_key="s")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()
