from __future__ import annotations

import pytest

from nightshift.api import ranges


@pytest.mark.parametrize(("indexes", "text"), [
    ([], ""),
    ([3], "3"),
    ([3, 17, 18, 19], "3,17-19"),
    ([19, 3, 18, 17, 3], "3,17-19"),
    # Two neighbours as "6,7", as the Job controller writes them (orderedIntervals.String
    # in k8s.io/kubernetes pkg/controller/job/indexed_job_utils.go), so the run's record
    # of a stage equals its Job's status.completedIndexes.
    ([0, 1, 2, 4, 6, 7], "0-2,4,6,7"),
    ([4, 5], "4,5"),
    ([0, 1, 2, 3, 5, 6, 9], "0-3,5,6,9"),
])
def test_compress_and_parse(indexes: list[int], text: str) -> None:
    assert ranges.compress(indexes) == text
    assert ranges.parse(text) == sorted(set(indexes))
    assert ranges.count(text) == len(set(indexes))


def test_parses_job_status_format() -> None:
    # As the Job controller writes status.completedIndexes.
    assert ranges.parse("1,3-5,7") == [1, 3, 4, 5, 7]
    assert ranges.parse(None) == []
    assert ranges.count("0-99999") == 100_000


@pytest.mark.parametrize("bad", ["a", "3-1", "-1", "1-x"])
def test_refuses_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        ranges.parse(bad)


def test_compress_refuses_negative() -> None:
    with pytest.raises(ValueError):
        ranges.compress([-1])


def test_truncate_keeps_it_parseable() -> None:
    text = ranges.compress(range(0, 2000, 2))
    cut, was_cut = ranges.truncate(text, 100)
    assert was_cut and len(cut) <= 100
    assert ranges.parse(cut) == list(range(0, 2 * len(ranges.parse(cut)), 2))
    assert ranges.truncate("1-5", 100) == ("1-5", False)
