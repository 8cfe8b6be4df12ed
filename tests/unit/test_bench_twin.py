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


def test_each_twin_gets_its_own_cpus_and_too_many_are_refused_with_the_most() -> None:
    from twin import same_cpus, twin_cpus
    assert twin_cpus(1, {0, 1}) == {0: "0", 1: "1"}
    assert twin_cpus(2, {0, 1, 2, 3, 4}) == {0: "0,1", 1: "2,3"}
    # Only the CPUs this process may use (a taskset around the bench) are handed out.
    assert twin_cpus(1, {2, 5, 7}) == {0: "2", 1: "5"}
    with pytest.raises(ValueError) as e:
        twin_cpus(2, {0, 1, 2})
    assert "need 4 CPUs" in str(e.value) and "may use 3 (0,1,2)" in str(e.value)
    assert "give at most 1" in str(e.value)
    with pytest.raises(ValueError):
        twin_cpus(0, {0, 1})
    # /proc's Cpus_allowed_list against taskset's list.
    assert same_cpus("0-1", "0,1") and same_cpus("3", "3") and same_cpus("0-2,5", "0,1,2,5")
    assert not same_cpus("0-1", "0") and not same_cpus("1", "0")


def test_more_cpus_per_twin_than_the_machine_has_is_refused_before_any_twin_starts(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import twin
    started: list[tuple[Any, ...]] = []
    monkeypatch.setattr(twin, "cluster", lambda *a: started.append(a))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(sys, "argv", ["twin.py", "--up", "--cores-per-twin", "2"])
    with pytest.raises(SystemExit) as e:
        twin.main()
    assert e.value.code == 2 and not started
    assert "--cores-per-twin 2: the twins need 4 CPUs" in capsys.readouterr().err


def test_twins_started_on_other_cpus_are_refused_with_the_way_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import twin
    for t in twin.CORES:
        (tmp_path / str(t)).mkdir()
        (tmp_path / str(t) / "state.json").write_text("{}")
    monkeypatch.setattr(twin, "twin_dir", lambda core: tmp_path / str(core))
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    # Twin 1 was started across both CPUs (another --cores-per-twin, or none).
    monkeypatch.setattr(twin, "pinned", lambda core: {"etcd": str(core), "kwok": str(core)}
                        if core == 0 else {"etcd": "0-1", "kwok": "1"})
    monkeypatch.setattr(sys, "argv", ["twin.py", "--sizes", "100"])
    with pytest.raises(SystemExit) as e:
        twin.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "twin 1's parts run on CPUs {'etcd': '0-1'}, not 1" in err
    assert "--up --cores-per-twin 1" in err
