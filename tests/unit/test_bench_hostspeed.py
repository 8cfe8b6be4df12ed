"""The host-speed probe beside a bench run (bench/hostspeed.py) and the ratio it adjusts."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fanout import host_adjusted
from hostspeed import HostSpeed, side_ratio_fit


def test_the_probe_samples_while_it_runs_and_leaves_nothing_behind() -> None:
    speed = HostSpeed()
    speed.start()
    time.sleep(1.0)
    proc = speed.proc
    out = speed.stop()
    assert proc is not None and proc.poll() is not None  # stopped, not left running
    assert out["samples"] >= 2
    assert out["chunk_ms"] > 0
    assert out["steal_s"] >= 0
    assert not speed.out.exists()


def run(pair: int, side: str, done_s: float, chunk_ms: float) -> dict[str, Any]:
    return {"pair": pair, "side": side, "done_s": done_s, "host": {"chunk_ms": chunk_ms}}


def test_a_side_on_slower_cores_is_judged_on_its_work_not_its_time() -> None:
    runs = [
        # Pair 1: the run took 20 % longer on cores 20 % slower: the same work.
        run(1, "bare", 100.0, 5.0), run(1, "run", 120.0, 6.0),
        # Pair 2 (run first): equal cores, the run 10 % slower.
        run(2, "run", 110.0, 5.0), run(2, "bare", 100.0, 5.0),
    ]
    assert host_adjusted(runs) == [1.0, 0.909]


def test_a_pair_missing_a_side_is_left_out() -> None:
    assert host_adjusted([run(1, "bare", 100.0, 5.0)]) == []


def test_the_fit_recovers_a_side_cost_hidden_under_host_speed() -> None:
    # Time in proportion to the host's chunk, the run 5 % slower at equal speed; the
    # host slowest exactly when the bare Job ran, so the raw times hide the cost.
    chunks = {(1, "bare"): 8.0, (1, "run"): 6.0, (2, "run"): 7.0, (2, "bare"): 7.5,
              (3, "bare"): 6.5, (3, "run"): 7.2}
    runs = [run(p, s, round(12.0 * c * (1.05 if s == "run" else 1.0), 6), c)
            for (p, s), c in chunks.items()]
    fit = side_ratio_fit(runs)
    assert fit["ratio"] == round(1 / 1.05, 3)
    assert fit["chunk_elasticity"] == 1.0
    assert fit["resid_sd"] < 1e-6 < fit["resid_sd_without_chunk"]
    assert host_adjusted(runs) == [round(1 / 1.05, 3)] * 3
