"""What a run's stages used of their pools' nodes, in dollars: O(stages), pure.

No pod is listed: each stage's Job says how many of its pods are Ready
(`status.ready`), and the watch delivers every change of it. Integrating that count
over time gives the stage's pod-seconds exactly to the Job controller's update delay,
which delays a pod's start and its end alike. Each change is timed by the API server's
record of the Job's last status write (`write_time`), not by when its watch event
arrived: on a loaded control plane events arrive late, and later when many pods start
at once than when they end one by one. A pod-second is priced at the pod's
dominant requested share of its pool's allocatable CPU or memory, times what the
pool's nodes cost per second (the VirtualCluster's status): a pool-wide average,
exact for a pool of one instance type.

What the run used is apportioned; the rest of the node time of its VirtualCluster
while the run was active is idle (`idleUSD`, which includes other runs' work when
several share one VirtualCluster). A pod counts from Ready, so an init container's
stage-in counts as idle, not as the stage's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nightshift.api import names
from nightshift.api.billing import DEFAULT_BILLING, node_usd_at
from nightshift.api.conditions import parse_rfc3339, rfc3339
from nightshift.virtualcluster.catalog import parse_quantity

# A Job's Ready count as the watch saw it: (when, Job name, stage, ready).
Sample = tuple[datetime, str, str, int]


@dataclass
class Tally:
    """Where the integration stands: up to `at`, with each Job's last Ready count.
    Kept by the run's loop between passes; rebuilt from status.cost after a restart."""

    at: datetime
    ready: dict[str, int] = field(default_factory=dict)
    stage_of: dict[str, str] = field(default_factory=dict)
    # When the last pass listed the Jobs whose counts `ready` holds: a change written
    # before then is in that list already (or superseded in it), so a late event for it
    # is dropped. None after a restart (nothing listed yet).
    listed_at: datetime | None = None


def write_time(arrived: datetime, meta: Mapping[str, Any]) -> datetime:
    """When the Job's status last changed, as near as its object says: its status
    subresource's managedFields time, which the API server sets on each write that
    changes a field, to the whole second. The write was before that + 1 s and before
    the watch event's arrival: the earlier of the two; without such an entry, the
    arrival. (The API server's clock against the operator's: both NTP-synced, as on
    EKS; a skew of a second or more would misplace changes by as much.)"""
    stamps = [t for e in meta.get("managedFields") or []
              if e.get("subresource") == "status"
              and (t := parse_rfc3339(e.get("time"))) is not None]
    if not stamps:
        return arrived
    wrote = max(stamps)
    return min(arrived, wrote + timedelta(seconds=1))


def pod_requests(pod_spec: Mapping[str, Any]) -> tuple[float, float]:
    """(CPU cores, memory bytes) as the scheduler counts a pod: containers and sidecars
    together, a plain init container alone before them."""
    def req(c: Mapping[str, Any], key: str) -> float:
        return parse_quantity(((c.get("resources") or {}).get("requests") or {}).get(key, 0))

    out = []
    for key in ("cpu", "memory"):
        inits = pod_spec.get("initContainers") or []
        side = sum(req(c, key) for c in inits if c.get("restartPolicy") == "Always")
        main = sum(req(c, key) for c in pod_spec.get("containers") or []) + side
        first = max((req(c, key) for c in inits if c.get("restartPolicy") != "Always"),
                    default=0.0)
        out.append(max(main, first + side))
    return out[0], out[1]


def pool_rates(vc_status: Mapping[str, Any] | None) -> dict[str, tuple[float, float]]:
    """Per pool, USD per second of one allocatable CPU core and of one memory byte."""
    out = {}
    for p in (vc_status or {}).get("pools") or []:
        cpu, mem = float(p.get("cpu") or 0), parse_quantity(p.get("memory") or 0)
        usd_s = float(p.get("hourlyUSD") or 0) / 3600.0
        if cpu > 0 and mem > 0 and usd_s > 0:
            out[str(p["name"])] = (usd_s / cpu, usd_s / mem)
    return out


def stage_rates(jobs: Sequence[Mapping[str, Any]], pool_of: Mapping[str, str],
                vc_status: Mapping[str, Any] | None) -> dict[str, float]:
    """USD per Ready pod-second of each stage whose pool has a known price."""
    rates, out = pool_rates(vc_status), {}
    for job in jobs:
        stage = _stage(job)
        template = ((job.get("spec") or {}).get("template") or {}).get("spec")
        rate = rates.get(pool_of.get(stage, ""))
        if template is None or rate is None:
            continue
        cpu, mem = pod_requests(template)
        out[stage] = max(cpu * rate[0], mem * rate[1])
    return out


def _stage(job: Mapping[str, Any]) -> str:
    meta = job.get("metadata") or {}
    return str((meta.get("labels") or {}).get(names.LABEL_STAGE) or meta.get("name"))


def restore(prev: Mapping[str, Any] | None) -> Tally | None:
    """The tally status.cost implies: each stage's last Ready count since observedAt."""
    at = parse_rfc3339((prev or {}).get("observedAt"))
    if prev is None or at is None:
        return None
    tally = Tally(at)
    for st in prev.get("stages") or []:
        key = f"stage:{st['name']}"
        tally.ready[key] = int(st.get("running") or 0)
        tally.stage_of[key] = str(st["name"])
    return tally


def advance(prev: Mapping[str, Any] | None, tally: Tally | None,
            samples: Sequence[Sample], jobs: Sequence[Mapping[str, Any]],
            rates: Mapping[str, float], vc_status: Mapping[str, Any] | None,
            now: datetime, *, frozen: bool = False,
            listed_at: datetime | None = None) -> tuple[dict[str, Any], Tally]:
    """status.cost and the tally as of `now`. `frozen`: the run has ended; nothing
    accrues any more and the figures stay as they are. `listed_at`: when `jobs` was
    read (a Ready change the watch saw after it is newer than the list).

    A frozen run's cost drops nodeUSDAtStart (once): if it runs again (rerun-failed),
    its node cost goes on from nodeUSD as it was, never counting the time it stood.
    """
    prev = dict(prev or {})
    tally = tally or restore(prev) or Tally(now)
    stages: dict[str, dict[str, Any]] = {str(s["name"]): dict(s) for s in prev.get("stages") or []}
    if frozen:
        prev.pop("nodeUSDAtStart", None)
        return prev, Tally(now)
    seconds: dict[str, float] = {}

    def run_to(t: datetime) -> None:
        dt = (t - tally.at).total_seconds()
        if dt <= 0:
            return
        for key, n in tally.ready.items():
            stage = tally.stage_of[key]
            seconds[stage] = seconds.get(stage, 0.0) + n * dt
        tally.at = t

    newer: dict[str, int] = {}  # Jobs whose Ready count changed after the list
    # Samples come in arrival order; one Job's changes keep their order where their
    # write times tie. This pass's Job list is a sample too, each Job's count as of its
    # last status write: a change the list has but whose event has not come yet counts
    # from that write, not from the next pass.
    timed: list[tuple[datetime, datetime, str, str, int]] = []
    last: dict[str, datetime] = {}
    for wrote, job_name, stage, ready in samples:
        if tally.listed_at is not None and wrote <= tally.listed_at:
            continue  # the last pass's list had it (`wrote` is an upper bound)
        t = min(max(wrote, last.get(job_name, wrote)), now)
        last[job_name] = t
        timed.append((max(t, tally.at), t, job_name, stage, ready))
    # After the samples of its time (a stable sort): a sample timed at or before the
    # list's write is in the list; one after it is newer than the list.
    listed = [] if listed_at is None else [
        (write_time(listed_at, job.get("metadata") or {}), job) for job in jobs]
    for wrote, job in listed:
        if tally.listed_at is None or wrote > tally.listed_at:
            timed.append((max(wrote, tally.at), wrote, str(job["metadata"]["name"]),
                          _stage(job), int((job.get("status") or {}).get("ready") or 0)))
    # Back to the last list at most: a write before it was in that list.
    floor = tally.at if tally.listed_at is None else min(tally.listed_at, tally.at)
    for t, wrote, job_name, stage, ready in sorted(timed, key=lambda s: s[0]):
        run_to(t)
        if wrote < t and f"stage:{stage}" not in tally.ready:
            # Written before the last pass ended, seen only now: that pass counted the
            # old number (none for a Job it had not seen) until its end, so the
            # difference is owed from the write on. Not after a restart (`restore`):
            # what the stage's Jobs counted then is not known.
            was = tally.ready.get(job_name, 0)
            seconds[stage] = (seconds.get(stage, 0.0)
                              + (ready - was) * (t - max(wrote, floor)).total_seconds())
        # A restart's tally counts by stage (restore): the Jobs' own counts replace it,
        # the listed ones for Jobs whose samples come later (a finished attempt's may
        # come first, timed long before: the stage must not count 0 meanwhile).
        if tally.ready.pop(f"stage:{stage}", None) is not None:
            for job in jobs:
                if _stage(job) == stage:
                    name = str(job["metadata"]["name"])
                    tally.ready[name] = int((job.get("status") or {}).get("ready") or 0)
                    tally.stage_of[name] = stage
        tally.ready[job_name], tally.stage_of[job_name] = ready, stage
        if listed_at is not None and t > listed_at:
            newer[job_name] = ready
    run_to(now)
    tally.at = now
    tally.listed_at = listed_at
    tally.ready = {}
    tally.stage_of = {}
    running: dict[str, int] = {}
    for job in jobs:
        name, stage = str(job["metadata"]["name"]), _stage(job)
        ready = newer.get(name, int((job.get("status") or {}).get("ready") or 0))
        tally.ready[name], tally.stage_of[name] = ready, stage
        running[stage] = running.get(stage, 0) + ready
    for stage in sorted(set(seconds) | set(running) | set(stages)):
        st = stages.setdefault(stage, {"name": stage, "usedUSD": 0.0, "podSeconds": 0.0,
                                       "pricedSeconds": 0.0})
        st["podSeconds"] = float(st.get("podSeconds", 0.0)) + seconds.get(stage, 0.0)
        st["running"] = running.get(stage, 0)
        if stage in rates:
            # Seconds seen before the pool had a price are priced at the first one known.
            unpriced = st["podSeconds"] - float(st.get("pricedSeconds", 0.0))
            st["usedUSD"] = float(st.get("usedUSD", 0.0)) + unpriced * rates[stage]
            st["pricedSeconds"] = st["podSeconds"]
            st["usdPerPodSecond"] = rates[stage]
    return _totals(prev, list(stages.values()), vc_status, now), tally


def _totals(prev: Mapping[str, Any], stages: list[dict[str, Any]],
            vc_status: Mapping[str, Any] | None, now: datetime) -> dict[str, Any]:
    used = sum(float(s.get("usedUSD", 0.0)) for s in stages)
    out: dict[str, Any] = {
        "billing": ((vc_status or {}).get("cost") or {}).get("billing") or DEFAULT_BILLING,
        "observedAt": rfc3339(now),
        "usedUSD": round(used, 9),
        "stages": [_rounded(s) for s in sorted(stages, key=lambda s: str(s["name"]))],
    }
    nodes_now = node_usd_at(vc_status, now)
    start = prev.get("nodeUSDAtStart")
    if start is None and nodes_now is not None:
        # The run's first priced pass, or its first after it stood ended (advance).
        start = nodes_now - float(prev.get("nodeUSD") or 0.0)
    if start is not None and nodes_now is not None:
        node = max(0.0, nodes_now - float(start))
        out.update(nodeUSDAtStart=round(float(start), 9), nodeUSD=round(node, 9),
                   idleUSD=round(max(0.0, node - used), 9))
    out["totalUSD"] = round(used + float(out.get("idleUSD", 0.0)), 9)
    return out


def _rounded(s: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(s)
    for k in ("usedUSD", "usdPerPodSecond"):
        if k in out:
            out[k] = round(float(out[k]), 9)
    for k in ("podSeconds", "pricedSeconds"):
        out[k] = round(float(out.get(k, 0.0)), 3)
    return out
