"""A stage's parallelism over time. Staggered launches (spec.launch.maxPodsPerMinute):
how far a stage Job's parallelism may be raised by now (pure: the start time and `now`
come in, the value and when to look again go out); and the stages held at 0.

Spot capacity asked for all at once is where partial fulfilment and interruptions
cluster; raising parallelism in small waves spreads the requests out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nightshift.api.conditions import parse_rfc3339
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.jobs import max_parallelism
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage

# Seconds between the parallelism raises of a staggered launch.
LAUNCH_STEP = 10


def paced(target: int, rate: int | None, start: str, now: datetime) -> tuple[int, float | None]:
    """The parallelism allowed `now` for a Job started at `start` (RFC 3339) that wants
    `target`, at `rate` pods per minute; and the seconds until the next raise (None when
    the target is reached or there is no rate)."""
    if not rate or target <= max(1, (rate * LAUNCH_STEP) // 60):
        return target, None
    try:
        started = parse_rfc3339(start)
    except ValueError:
        started = None  # a damaged record: count from now, never fail the pass
    now = now.replace(tzinfo=None, microsecond=0)
    elapsed = max(0.0, (now - started.replace(tzinfo=None)).total_seconds()) \
        if started else 0.0
    # Raise every LAUNCH_STEP seconds by that share of the per-minute rate, so pods
    # start in small waves rather than one burst per minute.
    steps = int(elapsed // LAUNCH_STEP) + 1
    allowed = max(1, (rate * steps * LAUNCH_STEP) // 60)
    if allowed < target:
        return allowed, LAUNCH_STEP * steps - elapsed
    return target, None


def attempt_start(record: Mapping[str, Any] | None, attempt: int, fallback: str) -> str:
    """When a stage's attempt started: from its status record first, so an operator
    restart keeps the stagger where it was."""
    for a in (record or {}).get("attempts") or []:
        if a.get("attempt") == attempt and a.get("startTime"):
            return str(a["startTime"])
    return fallback


def stage_parallelism(spec: PipelineRunSpec, st: Stage, completions: int, start: str,
                      now: datetime) -> tuple[int, float | None]:
    """A stage Job's parallelism now (its stage's or the run's knob, capped by the Job
    API and paced), and the seconds until it is raised again (None: not paced)."""
    target = spec.parallelism.get(st.name, st.parallelism)
    cap = max_parallelism(max(completions, 1))
    return paced(cap if target is None else min(target, cap),
                 spec.launch.max_pods_per_minute, start, now)


def paused(spec: PipelineRunSpec | None, records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Running stages held at parallelism 0, which otherwise read as plain Running."""
    if spec is None:
        return []
    running = {r["name"] for r in records if r["phase"] == pg.RUNNING}
    out = []
    for i, st in enumerate(spec.stages):
        if (st.name not in running or st.mpi is not None
                or spec.parallelism.get(st.name, st.parallelism) != 0):
            continue  # an MPI stage's MPIJob has no parallelism to hold: it runs on
        field = (f"spec.parallelism.{st.name}" if st.name in spec.parallelism
                 else f"spec.stages[{i}].parallelism")
        out.append(f"{field} is 0: stage {st.name} is paused (its running pods finish, no "
                   "new ones start); set it above 0 to go on")
    return out
