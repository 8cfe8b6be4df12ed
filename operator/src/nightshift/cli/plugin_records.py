"""`kubectl nightshift records`: task records as CSV rows. Pure.

Where the records are comes from the stage Job itself: its pod template carries the
runner's config (names.ENV_RUNNER_CONFIG: the archive's bucket, prefix and endpoint,
and which Secret holds its keys), and a record's key is a function of the item's index
(runner/record.py), so N records are N GETs and never a listing. An item's cost is its
seconds x its stage's `usdPerPodSecond` from the run's status.cost (docs/cost.md).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO

from nightshift.api import names
from nightshift.api.runnerwire import ConfigError, RunnerConfig

# The first columns, in this order; any other scalar field of a record follows, sorted.
COLUMNS = ("run", "stage", "index", "item", "attempt", "phase", "exitCode", "start", "end",
           "seconds", "node", "instanceType", "capacityType", "zone", "usd")
SKIPPED = {"version", "namespace", "previousAttempts", "steps", "manifests", "failedOutputs",
           "source"}


class RecordsError(Exception):
    """Records that cannot be found or read: says where and what to do."""


def _containers(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def runner_config(job: Mapping[str, Any]) -> RunnerConfig | None:
    """The runner's config in a stage Job's pod template; None for a Job without a runner
    (no inputs, outputs or archive: nothing writes records)."""
    for c in _containers(job):
        for e in c.get("env") or []:
            if e.get("name") == names.ENV_RUNNER_CONFIG and e.get("value"):
                try:
                    return RunnerConfig.loads(str(e["value"]))
                except ConfigError as err:
                    raise RecordsError(f"Job {job['metadata']['name']}: its runner config "
                                       f"does not parse ({err}); was it made by another "
                                       "Nightshift version?") from err
    return None


def secret_refs(job: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Env var name -> (Secret, key) for the archive credentials the runner reads."""
    out = {}
    for c in _containers(job):
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                out[str(e["name"])] = (str(ref["name"]), str(ref["key"]))
    return out


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def row(rec: Mapping[str, Any], usd_per_second: float | None) -> dict[str, Any]:
    start, end = _epoch(rec.get("start")), _epoch(rec.get("end"))
    seconds = None if start is None or end is None else max(0.0, end - start)
    out: dict[str, Any] = {k: rec.get(k) for k in COLUMNS}
    out["seconds"] = seconds
    out["usd"] = (None if seconds is None or usd_per_second is None
                  else round(seconds * usd_per_second, 8))
    for k, v in rec.items():
        if k not in out and k not in SKIPPED and (v is None or isinstance(v, (str, int,
                                                                               float, bool))):
            out[k] = v
    return out


def usd_per_second(run_status: Mapping[str, Any], stage: str) -> float | None:
    """The stage's mean price of a priced pod-second (usedUSD / pricedSeconds), as
    docs/cost.md prices an item: its last rate (usdPerPodSecond) would misprice the
    items run before the pool's price per CPU changed (spot falling back to on-demand)."""
    for s in (run_status.get("cost") or {}).get("stages") or []:
        if s.get("name") != stage:
            continue
        priced = float(s.get("pricedSeconds") or 0)
        if priced > 0 and s.get("usedUSD") is not None:
            return float(s["usedUSD"]) / priced
        return None
    return None


def parse(key: str, body: bytes) -> dict[str, Any]:
    try:
        rec = json.loads(body)
    except ValueError as e:
        raise RecordsError(f"task record {key} is not JSON ({e}); inspect it in the "
                           "archive") from e
    if not isinstance(rec, dict):
        raise RecordsError(f"task record {key} is not a JSON object")
    return rec


def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    return [*COLUMNS, *extra]


def write_csv(rows: Sequence[Mapping[str, Any]], out: TextIO) -> None:
    w = csv.DictWriter(out, fieldnames=columns(rows), extrasaction="ignore",
                       lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})


def indexes(record: Mapping[str, Any]) -> Iterable[int]:
    """Every index of a stage (its status record's total)."""
    return range(int(record.get("total") or 0))
