"""Is a twin pair steady? The API server's own pod-watch counters, before and after.

On this 2-core VM about one 10,000-item pair in two "runs away": one side's KWOK uses
two to three times the other's CPU for the same API writes, and that side's time says
more about KWOK than about the pod (docs/performance.md, sets AC to AJ). The API
server's metrics show it. Each stored pod change (a create, a bind, a status patch)
reaches every pod watcher once, four of them on a twin (the controller-manager, the
scheduler, KWOK, Karpenter: 4.67 events per change in a calm pair). On the runaway side
the API server sends more pod watch events per stored change and cuts more watchers as
unresponsive (a watcher whose buffer stays full is closed and watches again; by the
counters, watchers started again are sent the stored pods anew). So a pair
whose two sides' events per change differ by more than STEADY_SPREAD is flagged, and so
is one where either side passed RUNAWAY: two sides that ran away alike (set AO) are
close to each other and far from calm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Counters on the API server's /metrics, for the core group's pods.
COUNTERS = {
    "changes": "apiserver_watch_cache_events_received_total",
    "sent": "apiserver_watch_events_total",
    "cut": "apiserver_terminated_watchers_total",
}
# Events per change that differ by more than this between a pair's sides: not steady.
# A first cut, fitted to few pairs: set AJ's pair 1 had 4.9 on the steady side and 10.3
# on the runaway one; set AK's pairs differed by 17 to 22 %, the MPI Operator only one
# twin ran; set AL's, on twins alike, by at most 10 % (docs/performance.md).
STEADY_SPREAD = 0.10
# Events per change above this on a side: it ran away, whatever the other side did. Calm
# sides read 3.7 (twins without Karpenter, 500 items) to 5.4 (set AL's pair 1, with it,
# 59 and 82 watchers cut); runaway sides 10.3 (AJ) to 18.6 (AN), and set AO's two sides
# 17.1 and 16.2, 6 % apart.
RUNAWAY = 8.0


def pod_counters(metrics_text: str) -> dict[str, float]:
    """The three pod-watch counters from an API server's /metrics text (0 when absent:
    a counter with no event yet is not printed)."""
    by_name = {v: k for k, v in COUNTERS.items()}
    out = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            key = by_name.get(sample.name)
            if (key and sample.labels.get("resource") == "pods"
                    and sample.labels.get("group", "") == ""):
                out[key] += sample.value
    return out


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    """What one side's run made the API server do: stored pod changes, pod watch events
    sent, events per change, and watchers cut."""
    d = {k: after[k] - before[k] for k in COUNTERS}
    per = d["sent"] / d["changes"] if d["changes"] > 0 else None
    return {"pod_changes": int(d["changes"]), "watch_events": int(d["sent"]),
            "events_per_change": round(per, 3) if per is not None else None,
            "watchers_cut": int(d["cut"])}


def spread(a: Mapping[str, Any], b: Mapping[str, Any]) -> float | None:
    """How far apart two sides' events per change are: larger / smaller - 1."""
    x, y = a.get("events_per_change"), b.get("events_per_change")
    if not x or not y:
        return None
    return round(max(float(x), float(y)) / min(float(x), float(y)) - 1, 3)


def steady(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool | None:
    """Whether a pair's sides made their API servers do alike per change, and neither
    ran away (None: a side has no figures, e.g. a results file from before they were
    taken)."""
    return None if spread(a, b) is None else not unsteady_because(a, b)


def unsteady_because(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Why a pair is not steady, for the bench's output ("" when it is, or unknown)."""
    s = spread(a, b)
    if s is None:
        return ""
    high = [float(x["events_per_change"]) for x in (a, b)
            if float(x["events_per_change"]) > RUNAWAY]
    if high:
        which = "both sides" if len(high) == 2 else "a side"
        return (f"{which} ran away: {' and '.join(f'{x:g}' for x in high)} events per "
                f"change, above {RUNAWAY:g}")
    return f"apart by {s:.0%}" if s > STEADY_SPREAD else ""
