"""S3 bucket names as the CRDs' CEL rule admits them, checked again here for objects
stored before the rule existed (and by `nightshift validate`).

Only the mistake is refused, a URL or a path where the name goes: buckets made in
us-east-1 before 2018 may have upper-case letters and underscores, and stay usable."""

from __future__ import annotations

from nightshift.api.problems import Problem

# The CRDs' rule: !self.contains('/'), minLength 3, maxLength 63.
MESSAGE = "must be a bucket name alone, not an s3:// URL or a path: put the key path in prefix"


def problem(path: str, bucket: str) -> Problem | None:
    if 3 <= len(bucket) <= 63 and "/" not in bucket:
        return None
    return Problem(path, f"{bucket!r} {MESSAGE}")
