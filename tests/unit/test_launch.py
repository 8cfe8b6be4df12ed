"""Staggered launches: parallelism raised in waves of the per-minute rate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightshift.pipelinerun.launch import LAUNCH_STEP, paced

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
START = "2025-03-01T12:00:00Z"


def test_no_rate_or_a_small_target_goes_at_once() -> None:
    assert paced(500, None, START, T0) == (500, None)
    assert paced(10, 120, START, T0) == (10, None)  # 120/min: 20 per 10-s wave


def test_waves_of_the_rate_until_the_target() -> None:
    assert paced(500, 120, START, T0) == (20, float(LAUNCH_STEP))
    assert paced(500, 120, START, T0 + timedelta(seconds=25)) == (60, 5.0)
    assert paced(500, 120, START, T0 + timedelta(minutes=5)) == (500, None)


def test_an_unreadable_start_counts_from_now() -> None:
    assert paced(500, 120, "not a time", T0) == (20, float(LAUNCH_STEP))
