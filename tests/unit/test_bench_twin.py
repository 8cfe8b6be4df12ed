"""The twin-cluster fan-out bench's summary (bench/twin.py): the core swap cancels a
faster core."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from twin import summary


def pair(n: int, job_core: int, job_s: float, run_s: float) -> dict[str, Any]:
    return {"pair": n, "ratio": round(job_s / run_s, 3),
            "first": {"side": "bare", "core": job_core, "done_s": job_s},
            "second": {"side": "run", "core": 1 - job_core, "done_s": run_s}}


def test_a_slower_core_cancels_out_of_the_balanced_ratio() -> None:
    # The run's pods cost 4 % more; core 0 is 10 % slower than core 1.
    true, slow = 1 / 1.04, 1.10
    pairs = [pair(1, 0, 100 * slow, 100 / true), pair(2, 1, 100, 100 * slow / true),
             pair(3, 0, 100 * slow, 100 / true), pair(4, 1, 100, 100 * slow / true)]
    out = summary(pairs)
    assert out["balanced_ratio"] == pytest.approx(true, abs=0.002)
    assert out["core_effect"] == pytest.approx(1 / slow, abs=0.002)
    # The median of the raw pairs sits between the two cores' readings.
    assert out["pair_ratio"] == [1.058, 0.874, 1.058, 0.874]
    assert out["speed_ratio"] == pytest.approx((1.058 + 0.874) / 2, abs=0.001)
    assert out["ratio_range"] == [0.874, 1.058]


def test_pairs_all_one_way_give_no_balanced_figure() -> None:
    out = summary([pair(1, 0, 100, 100), pair(2, 0, 98, 100)])
    assert out["balanced_ratio"] is None and out["core_effect"] is None
    assert out["speed_ratio"] == 0.99


def test_a_variant_name_that_is_not_one_is_refused_with_the_list(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import twin
    monkeypatch.setattr(sys, "argv", ["twin.py", "--variants", "bare", "+nothing"])
    with pytest.raises(SystemExit) as e:
        twin.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "'+nothing' is not a variant here" in err and "+perIndex" in err


def test_only_steady_pairs_make_the_steady_median() -> None:
    pairs = [pair(1, 0, 1110, 843) | {"steady": False}, pair(2, 1, 100, 104) | {"steady": True},
             pair(3, 0, 100, 102) | {"steady": True}, pair(4, 1, 100, 100)]
    out = summary(pairs)
    assert out["steady_pairs"] == 2
    assert out["steady_speed_ratio"] == pytest.approx((0.962 + 0.980) / 2, abs=0.001)
    assert summary(pairs[:1])["steady_speed_ratio"] is None
