"""A twin pair's steadiness from the API servers' pod-watch counters (bench/watchstats.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from watchstats import delta, pod_counters, spread, steady, unsteady_because

METRICS = """\
# HELP apiserver_watch_events_total [ALPHA] Number of events sent in watch clients
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="",resource="pods",version="v1"} 1.101014e+06
apiserver_watch_events_total{group="",resource="nodes",version="v1"} 5000
apiserver_watch_events_total{group="batch",resource="jobs",version="v1"} 812
apiserver_watch_cache_events_received_total{group="",resource="pods"} 121357
apiserver_watch_cache_events_received_total{group="",resource="configmaps"} 7
apiserver_terminated_watchers_total{group="",resource="pods"} 134
apiserver_watch_events_sizes_count{group="",resource="pods",version="v1"} 878279
"""


def test_only_the_core_groups_pod_counters_are_read() -> None:
    assert pod_counters(METRICS) == {"changes": 121357.0, "sent": 1101014.0, "cut": 134.0}


def test_a_counter_not_printed_yet_reads_zero() -> None:
    assert pod_counters("apiserver_watch_events_total"
                        '{group="",resource="pods",version="v1"} 9\n')["cut"] == 0.0


def test_delta_gives_events_per_change() -> None:
    before = {"changes": 85161.0, "sent": 878279.0, "cut": 117.0}
    after = pod_counters(METRICS)
    d = delta(before, after)
    assert d == {"pod_changes": 36196, "watch_events": 222735,
                 "events_per_change": 6.154, "watchers_cut": 17}
    assert delta(after, after)["events_per_change"] is None


def test_sides_alike_are_steady_and_a_runaway_is_not() -> None:
    calm = {"events_per_change": 4.97}
    assert steady(calm, {"events_per_change": 5.05}) is True
    # Set AJ's pair 1: 10.3 events per change on the runaway side against 4.9.
    assert spread(calm, {"events_per_change": 10.3}) == 1.072
    assert steady({"events_per_change": 10.3}, calm) is False
    assert steady(calm, {}) is None


def test_two_sides_that_ran_away_alike_are_not_steady() -> None:
    # Set AO's pair 1: 17.069 and 16.168 events per change, 6 % apart.
    a, b = {"events_per_change": 17.069}, {"events_per_change": 16.168}
    assert spread(a, b) == 0.056
    assert steady(a, b) is False
    assert unsteady_because(a, b) == ("both sides ran away: 17.069 and 16.168 events per "
                                      "change, above 8")
    calm = {"events_per_change": 4.97}
    assert unsteady_because(calm, {"events_per_change": 10.3}) == (
        "a side ran away: 10.3 events per change, above 8")
    assert unsteady_because(calm, {"events_per_change": 5.9}) == "apart by 19%"
    assert unsteady_because(calm, {"events_per_change": 5.05}) == ""
    assert unsteady_because(calm, {}) == ""
