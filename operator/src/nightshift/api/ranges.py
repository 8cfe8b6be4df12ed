"""Index sets as compressed ranges: "3,17-19".

The same text format as a Job's status.completedIndexes and status.failedIndexes, so
the status of a run with 100,000 items stays small and Job fields parse directly.
"""

from __future__ import annotations

from collections.abc import Iterable


def compress(indexes: Iterable[int]) -> str:
    """Sorted, de-duplicated indexes as "a,b-c" (empty string for no indexes)."""
    parts: list[str] = []
    start = prev = None
    for i in sorted(set(indexes)):
        if i < 0:
            raise ValueError(f"index {i} is negative")
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(span(start, prev))
        start = prev = i
    if start is not None:
        parts.append(span(start, prev))
    return ",".join(parts)


def span(start: int, end: int | None) -> str:
    """One range's text: "3", "4,5" or "17-19"."""
    # As the Job controller writes them (orderedIntervals.String): two neighbours are
    # "4,5", not "4-5", so a record compares equal to the Job field it was read from.
    if end is None or end == start:
        return str(start)
    return f"{start},{end}" if end == start + 1 else f"{start}-{end}"


def parse(text: str | None) -> list[int]:
    """The sorted indexes of a compressed range string; "" and None give []."""
    out: set[int] = set()
    for lo, hi in spans(text):
        out.update(range(lo, hi + 1))
    return sorted(out)


def spans(text: str | None) -> list[tuple[int, int]]:
    """The (first, last) pairs of a range string, without expanding them."""
    result: list[tuple[int, int]] = []
    for raw in (text or "").split(","):
        part = raw.strip()
        if not part:
            continue
        lo_s, sep, hi_s = part.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if sep else lo
        except ValueError:
            raise ValueError(f"bad index range {part!r} in {text!r}") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"bad index range {part!r} in {text!r}")
        result.append((lo, hi))
    return result


def count(text: str | None) -> int:
    """How many indexes a range string names (assumes no overlaps, as Jobs write it)."""
    return sum(hi - lo + 1 for lo, hi in spans(text))


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut a range string at a comma so it stays parseable and at most `limit` long.

    Returns the text and whether anything was cut; the status keeps only a prefix of
    a pathological failure pattern (every other item failing) to stay under 16 KB.
    """
    if len(text) <= limit:
        return text, False
    cut = text.rfind(",", 0, limit + 1)
    return (text[:cut] if cut > 0 else ""), True
