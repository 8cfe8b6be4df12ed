"""A simulation's duration model: per stage, how long an item takes. Pure.

MODEL.yaml (docs/simulate.md):

    scale: 0.004                 # real seconds per modelled second
    bootSeconds: 90              # an instance's launch-to-Ready time, modelled
    spotInterruptionsPerHour: 0  # per spot node per modelled hour
    billing: perSecond           # or perHour (the seeds' era)
    spotFraction: 0.12           # price spot at this fraction of on-demand (optional)
    seed: 1
    items: {stage: count}        # for item sources a simulation cannot read (fromS3, fromFile)
    stages:
      copy:   {fixed: 3600}
      split:  {normal: {mean: 3600, sd: 900}}
      invert: {lognormal: {median: 2967, sigma: 0.25}}
      concat: {fromCSV: {file: records.csv, stage: concat}}

A stage's model becomes QUANTILES quantiles of its pod's duration (a pod of a batched
stage runs `batch` items one after the other, so its quantiles are those of a sum,
estimated by a seeded Monte Carlo). KWOK ends each pod after the quantile its index
hashes to (hack/kwok/pod-sim-duration.yaml): a constant-size annotation for any item
count, and a retried item keeps its duration.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from nightshift.api.billing import BILLINGS, DEFAULT_BILLING, Billing

QUANTILES = 64
MONTE_CARLO = 4096
# KWOK cannot end a pod much sooner than about a second after it is Ready.
MIN_REAL_SECONDS = 0.5
DEFAULT_SCALE = 0.01
DEFAULT_BOOT_SECONDS = 90.0
DISTRIBUTIONS = ("fixed", "normal", "lognormal", "fromCSV")
FIELDS = {"scale", "bootSeconds", "spotInterruptionsPerHour", "billing", "spotFraction",
          "seed", "items", "stages"}


class ModelError(ValueError):
    """A duration model that cannot be used: says where and how to fix it."""


@dataclass(frozen=True)
class Model:
    scale: float = DEFAULT_SCALE
    boot_seconds: float = DEFAULT_BOOT_SECONDS
    spot_interruptions_per_hour: float = 0.0
    billing: Billing = DEFAULT_BILLING
    seed: int = 1
    # Spot at this fraction of the on-demand price instead of the catalog's spot price
    # (Karpenter's KWOK catalog makes every spot price 70% of on-demand).
    spot_fraction: float | None = None
    items: Mapping[str, int] = field(default_factory=dict)
    stages: Mapping[str, Sequence[float]] = field(default_factory=dict)  # item quantiles

    def pod_quantiles(self, stage: str, batch: int = 1) -> list[float]:
        """Modelled seconds of one pod of `stage`: QUANTILES values (one if fixed)."""
        if stage not in self.stages:
            raise ModelError(f"durations: stages.{stage}: missing. Every stage of the run "
                             f"needs a model: add e.g. `{stage}: {{fixed: 60}}`.")
        return sum_quantiles(self.stages[stage], max(1, batch), self.seed)

    def real(self, modelled_seconds: float) -> float:
        return modelled_seconds * self.scale

    def modelled(self, real_seconds: float) -> float:
        return real_seconds / self.scale


def _num(raw: Mapping[str, Any], key: str, where: str, *, minimum: float = 0.0,
         default: float | None = None) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < minimum:
        raise ModelError(f"durations: {where}{key}: {v!r} is not a number >= {minimum:g}; "
                         f"give one, e.g. `{key}: {default if default is not None else 60}`.")
    return float(v)


def probabilities(k: int = QUANTILES) -> list[float]:
    return [(i + 0.5) / k for i in range(k)]


def csv_seconds(path: Path, stage: str, where: str) -> list[float]:
    """The `seconds` column of a task-record CSV (`kubectl nightshift records -o csv`),
    rows of `stage` only."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ModelError(f"durations: {where}fromCSV.file: cannot read {path}: {e}") from e
    if rows and not {"stage", "seconds"} <= set(rows[0]):
        raise ModelError(f"durations: {where}fromCSV.file: {path} has no `stage` and "
                         "`seconds` columns; export it with `kubectl nightshift records RUN "
                         "-o csv`.")
    out = [float(r["seconds"]) for r in rows if r["stage"] == stage and r.get("seconds")]
    if not out:
        raise ModelError(f"durations: {where}fromCSV: {path} has no row of stage {stage!r} "
                         "with seconds; set fromCSV.stage to a stage it holds.")
    return out


def empirical_quantiles(values: Sequence[float], k: int = QUANTILES) -> list[float]:
    s = sorted(values)
    return [s[min(len(s) - 1, int(p * len(s)))] for p in probabilities(k)]


def item_quantiles(raw: Any, where: str, base: Path) -> list[float]:
    if not isinstance(raw, Mapping) or len(raw) != 1 or next(iter(raw)) not in DISTRIBUTIONS:
        raise ModelError(f"durations: {where}: {raw!r} is not one of "
                         f"{', '.join(DISTRIBUTIONS)}; e.g. `{{fixed: 60}}` or "
                         "`{lognormal: {median: 60, sigma: 0.3}}`.")
    kind, v = next(iter(raw.items()))
    if kind == "fixed":
        return [_num(raw, "fixed", f"{where}.")]
    if not isinstance(v, Mapping):
        raise ModelError(f"durations: {where}.{kind}: give its parameters as a mapping.")
    ps = probabilities()
    if kind == "normal":
        mean, sd = _num(v, "mean", f"{where}.normal."), _num(v, "sd", f"{where}.normal.")
        # Truncated at zero: a task never takes negative time.
        return [max(0.0, mean + sd * NormalDist().inv_cdf(p)) for p in ps]
    if kind == "lognormal":
        median = _num(v, "median", f"{where}.lognormal.", minimum=1e-9)
        sigma = _num(v, "sigma", f"{where}.lognormal.")
        return [median * math.exp(sigma * NormalDist().inv_cdf(p)) for p in ps]
    path = Path(str(v.get("file", "")))
    if not v.get("file"):
        raise ModelError(f"durations: {where}.fromCSV.file: missing; name the CSV that "
                         "`kubectl nightshift records RUN -o csv` wrote.")
    stage = str(v.get("stage") or where.rsplit(".", 1)[-1])
    return empirical_quantiles(csv_seconds(path if path.is_absolute() else base / path,
                                           stage, f"{where}."))


def sum_quantiles(items: Sequence[float], batch: int, seed: int) -> list[float]:
    """Quantiles of the sum of `batch` draws from `items`' quantiles."""
    if len(items) == 1 or batch == 1:
        return [batch * x for x in items] if len(items) == 1 else list(items)
    rng = random.Random(seed)  # noqa: S311  (a reproducible model, not a secret)
    sums = [sum(rng.choice(items) for _ in range(batch)) for _ in range(MONTE_CARLO)]
    return empirical_quantiles(sums)


def parse(raw: Any, base: Path = Path(".")) -> Model:
    """MODEL.yaml's content; `base` resolves relative CSV paths."""
    if not isinstance(raw, Mapping):
        raise ModelError("durations: the file must be a mapping with `stages:` "
                         "(docs/simulate.md has an example).")
    unknown = set(raw) - FIELDS
    if unknown:
        raise ModelError(f"durations: unknown field(s) {sorted(unknown)}; the fields are "
                         f"{', '.join(sorted(FIELDS))}.")
    fraction = raw.get("spotFraction")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(
            fraction, (int, float)) or not 0 < fraction <= 1):
        raise ModelError(f"durations: spotFraction: {fraction!r} is not a number in (0, 1]; "
                         "e.g. 0.12 for 2015's spot prices (seed 002, Table 1).")
    billing = raw.get("billing", DEFAULT_BILLING)
    if billing not in BILLINGS:
        raise ModelError(f"durations: billing: {billing!r} is not one of {list(BILLINGS)}.")
    stages = raw.get("stages")
    if not isinstance(stages, Mapping) or not stages:
        raise ModelError("durations: stages: missing; give each stage a model, e.g. "
                         "`stages: {reduce: {fixed: 60}}`.")
    items = raw.get("items") or {}
    if not isinstance(items, Mapping) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in items.values()):
        raise ModelError("durations: items: give a positive count per stage, e.g. "
                         "`items: {reduce: 400}`.")
    return Model(
        scale=_num(raw, "scale", "", minimum=1e-9, default=DEFAULT_SCALE),
        boot_seconds=_num(raw, "bootSeconds", "", default=DEFAULT_BOOT_SECONDS),
        spot_interruptions_per_hour=_num(raw, "spotInterruptionsPerHour", "", default=0.0),
        billing=billing, seed=int(_num(raw, "seed", "", default=1)),
        spot_fraction=None if fraction is None else float(fraction),
        items={str(k): int(v) for k, v in items.items()},
        stages={str(k): item_quantiles(v, f"stages.{k}", base) for k, v in stages.items()})


def annotation(seconds: Sequence[float], model: Model) -> str:
    """The pod annotation KWOK reads: real seconds, comma-separated."""
    return ",".join(f"{max(MIN_REAL_SECONDS, model.real(s)):.3f}".rstrip("0").rstrip(".")
                    for s in seconds)
