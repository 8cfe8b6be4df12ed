"""Ranged download planning and checksum choice."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from nightshift.runner.download import plan_ranges, relative_dest, verifier
from nightshift.runner.store import ObjectInfo


@pytest.mark.parametrize("size", [1, 15, 16, 17, 100, 16 * 7])
def test_ranges_cover_exactly_once(size: int) -> None:
    ranges = plan_ranges(size, 16)
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(0 < e - s <= 16 for s, e in ranges)


def test_no_ranges_for_empty_object() -> None:
    assert plan_ranges(0, 16) == []


def test_verifier_prefers_own_sha256_then_md5_etag() -> None:
    md5 = "0" * 32
    assert verifier(ObjectInfo("k", 1, md5), {"sha256": "ab"}) == ("sha256", "ab")
    assert verifier(ObjectInfo("k", 1, md5), {}) == ("md5", md5)
    assert verifier(ObjectInfo("k", 1, md5 + "-3"), {}) == ("size", None)


def test_relative_dest_refuses_escapes(tmp_path: Path) -> None:
    base = tmp_path
    assert relative_dest(base, "p/", "p/a/b.txt", single=False) == (base / "a/b.txt").resolve()
    assert relative_dest(base, "p/x.fits", "p/x.fits", single=True) == (base / "x.fits").resolve()
    with pytest.raises(ValueError, match="outside"):
        relative_dest(base, "p/", "p/../../etc/passwd", single=False)
