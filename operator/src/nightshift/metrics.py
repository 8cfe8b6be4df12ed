"""Prometheus metrics of the operator (served on NIGHTSHIFT_METRICS_PORT).

Names are the contract with the chart's Grafana dashboard
(charts/nightshift/dashboards/nightshift.json): change both together.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

PASSES = Counter("nightshift_passes", "Reconcile passes run, per kind.", ["kind"])
WAKEUPS = Counter("nightshift_wakeups",
                  "Wake-ups received (watch events on owned objects), per kind; passes "
                  "divided by wake-ups shows how much coalescing saves.", ["kind"])
RECONCILE_SECONDS = Histogram("nightshift_reconcile_seconds",
                              "Duration of one reconcile pass, per kind.", ["kind"],
                              buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
RECONCILE_ERRORS = Counter("nightshift_reconcile_errors",
                           "Reconcile passes that raised, per kind and error class "
                           "(api: the Kubernetes API refused or failed; unexpected: a bug).",
                           ["kind", "error"])
LOOPS = Gauge("nightshift_loops", "Reconcile loops alive, per kind (one per object; a "
              "stopping loop counts until its pass in flight ends).", ["kind"])
API_CALLS = Counter("nightshift_api_calls", "Kubernetes API calls made, per verb and resource.",
                    ["verb", "resource"])
RUNS = Gauge("nightshift_runs", "PipelineRuns by phase, as last seen by a pass.",
             ["namespace", "phase"])
ITEMS = Gauge("nightshift_items", "Items of a PipelineRun stage by state.",
              ["namespace", "run", "stage", "state"])

# The last phase each run's pass saw, so RUNS counts runs per phase without listing.
_phases: dict[tuple[str, str], str] = {}
_stages: dict[tuple[str, str], set[str]] = {}
# (namespace, phase) series RUNS has now, so a count that drops to none is removed.
_counted: set[tuple[str, str]] = set()
# Passes of different runs call this from worker threads at once.
_lock = threading.Lock()
ITEM_STATES = ("succeeded", "failed", "running")


def observe_run(namespace: str, name: str, status: Mapping[str, Any] | None) -> None:
    """Record a run's phase and per-stage item counts from the status a pass wrote
    (None: the run is gone)."""
    with _lock:
        _observe(namespace, name, status)


def _observe(namespace: str, name: str, status: Mapping[str, Any] | None) -> None:
    key = (namespace, name)
    if status is None:
        _phases.pop(key, None)
        for stage in _stages.pop(key, set()):
            for state in ITEM_STATES:
                ITEMS.remove(namespace, name, stage, state)
    else:
        _phases[key] = str(status.get("phase") or "Pending")
        seen = _stages.setdefault(key, set())
        for st in status.get("stages") or []:
            stage = str(st.get("name"))
            seen.add(stage)
            for state in ITEM_STATES:
                ITEMS.labels(namespace, name, stage, state).set(float(st.get(state) or 0))
    counts: dict[tuple[str, str], int] = {}
    for (ns, _), phase in _phases.items():
        counts[(ns, phase)] = counts.get((ns, phase), 0) + 1
    # Set in place, never cleared first: a scrape between the two would see no runs.
    for gone in _counted - counts.keys():
        RUNS.remove(*gone)
    for (ns, phase), n in counts.items():
        RUNS.labels(ns, phase).set(n)
    _counted.clear()
    _counted.update(counts)
