"""S3 bucket names as the CRDs' CEL rule admits them, checked again here for objects
stored before the rule existed (and by `nightshift validate`)."""

from __future__ import annotations

import re

from nightshift.api.problems import Problem

# The CRDs' rule: self.matches('^[a-z0-9][-a-z0-9.]*[a-z0-9]$'), minLength 3, maxLength 63.
BUCKET = re.compile(r"^[a-z0-9][-a-z0-9.]*[a-z0-9]$")
MESSAGE = ("must be a bucket name alone (lower-case letters, digits, '.' and '-'), not an "
           "s3:// URL or a path: put the key path in prefix")


def problem(path: str, bucket: str) -> Problem | None:
    if 3 <= len(bucket) <= 63 and BUCKET.match(bucket):
        return None
    return Problem(path, f"{bucket!r} {MESSAGE}")
