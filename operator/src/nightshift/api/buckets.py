"""S3 bucket and region names as the CRDs' CEL rules admit them, checked again here for
objects stored before the rules existed (and by `nightshift validate`).

Only the mistake is refused, a URL or a path where the name goes: buckets made in
us-east-1 before 2018 may have upper-case letters and underscores, and stay usable."""

from __future__ import annotations

import re

from nightshift.api.problems import Problem

# The CRDs' rule: !self.contains('/'), minLength 3, maxLength 63.
MESSAGE = "must be a bucket name alone, not an s3:// URL or a path: put the key path in prefix"


def problem(path: str, bucket: str) -> Problem | None:
    if 3 <= len(bucket) <= 63 and "/" not in bucket:
        return None
    return Problem(path, f"{bucket!r} {MESSAGE}")


# The CRDs' rule for s3.region: a host label, as boto3 requires (a region in any other
# form fails every S3 call). Not AWS's list: S3-compatible stores name their own.
REGION = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?")
REGION_MESSAGE = ("must be a region name such as us-west-2: letters, digits and '-', not "
                  "all digits, no '-' at either end")


def region_problem(path: str, region: str | None) -> Problem | None:
    if region is None or (REGION.fullmatch(region) and not region.isdigit()):
        return None
    return Problem(path, f"{region!r} {REGION_MESSAGE}")
