"""An S3 credentials Secret (a storage's credentialsSecret): its two keys, or what is
wrong with it, in the words both the PipelineRun (its item listing) and the SharedStorage
(its status) say it. Pure."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def keys_of(secret: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The access key and secret key (None where absent or empty). UnicodeDecodeError
    when one is not text."""
    data = secret.get("data") or {}
    access, key = (base64.b64decode(data.get(k, "")).decode() or None for k in SECRET_KEYS)
    return access, key


def problem(secret: Mapping[str, Any] | None, name: str) -> str | None:
    """What is wrong with Secret `name` (None: not there) for S3, with the fix; None when
    both keys are there. Not an invalid spec: the Secret can be mended in place."""
    if secret is None:
        return f"Secret {name} does not exist (it needs {' and '.join(SECRET_KEYS)})"
    try:
        keys = keys_of(secret)
    except UnicodeDecodeError:
        return (f"Secret {name}'s {' or '.join(SECRET_KEYS)} is not UTF-8 text; store the "
                "keys as plain text")
    missing = [k for k, v in zip(SECRET_KEYS, keys, strict=True) if not v]
    if missing:
        # Without both keys boto3 would fall back to another identity (the pod's role).
        return f"Secret {name} has no {' or '.join(missing)}; add the key to the Secret"
    return None
