"""kubectl nightshift status/cost rendering and the rerun/suspend/resume/cancel decisions,
on hand-built statuses and on a 100,000-item status made by the real planner."""

from __future__ import annotations

import copy
import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from nightshift.cli import plugin_ops as ops
from nightshift.cli import plugin_render as pr
from tests.unit import test_status_size as big

NOW = datetime(2025, 3, 1, 14, 0, 0, tzinfo=UTC)


def render(obj: Any, width: int = 120) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(obj)
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def big_run() -> dict[str, Any]:
    run = big._run()
    run["status"] = big.worst_case_status()
    return run


def test_summary_of_a_100k_item_status() -> None:
    s = pr.summary(big_run())
    assert (s["phase"], s["terminal"], s["total"]) == ("Running", False, 200_000)
    split, invert, concat = s["stages"]
    assert (split["phase"], split["succeeded"], split["failed"], split["pending"]) == (
        "Succeeded", 90_001, 9_999, 0)
    assert split["failedItemsTruncated"] is True
    assert split["failedItems"].startswith("0,10,20,")
    assert [x["index"] for x in split["failureSamples"]] == [0, 10, 20]
    assert (invert["succeeded"], invert["failed"], invert["running"], invert["pending"]) == (
        45_000, 5_000, 5_000, 45_000)
    assert concat == {"name": "concat", "phase": "Pending", "total": 0, "succeeded": 0,
                      "failed": 0, "running": 0, "pending": 0}
    # Conditions that merely restate a Running phase are not news.
    assert s["conditions"] == []
    text = json.dumps(s)
    assert len(text) < 16 * 1024, "the summary stays the size of the status"


def test_status_view_of_a_100k_item_status() -> None:
    out = render(pr.status_view(pr.summary(big_run()), now=NOW, width=120), width=120)
    lines = out.splitlines()
    assert lines[0].startswith("PipelineRun physics/nightly  Running  135,001/200,000 items")
    split = next(x for x in lines if x.startswith("split "))
    assert split.split()[2:] == [pr.bar(pr.stage_summary({
        "total": 100_000, "succeeded": 90_001, "failed": 9_999})).plain,
        "90,001", "9,999", "0", "0", "100,000", "0"]
    invert = next(x for x in lines if x.startswith("invert "))
    assert "45,000" in invert and "5,000" in invert
    concat = next(x for x in lines if x.startswith("concat "))
    assert concat.split()[-3:] == ["-", "-", "-"]
    assert "  split: 9,999 failed, indexes 0,10,20," in out
    assert "    #0 exit 3 Error: xxx" in out
    assert "kubectl nightshift items nightly --stage split --failed" in out
    assert "conditions:" not in out and "cost:" not in out
    # Cut to the width, not wrapped: a 512-char range list stays on one line.
    assert max(len(x) for x in lines) <= 120


def test_bar_shows_one_failure_among_100k() -> None:
    b = pr.bar({"total": 100_000, "succeeded": 99_999, "failed": 1}, width=30)
    assert len(b.plain) == 30 and b.plain.count("▓") == 1 and b.plain.count("█") == 29
    b = pr.bar({"total": 10, "succeeded": 3, "failed": 2, "running": 1, "pending": 4}, 10)
    assert b.plain == "███▓▓▒░░░░"
    assert pr.bar({"total": 0}, 8).plain == "·" * 8
    for counts in ([1, 1, 1, 97], [0, 0, 0, 5], [7, 0, 0, 0], [1, 1, 1, 1]):
        s = dict(zip(("succeeded", "failed", "running", "pending"), counts, strict=True))
        s["total"] = sum(counts)
        assert len(pr.bar(s, 3).plain) == 3, counts
    # Narrower than the parts: the failure is the last to go.
    assert pr.bar({"total": 100, "succeeded": 1, "failed": 1, "running": 1,
                   "pending": 97}, 2).plain == "█▓"


def test_only_conditions_off_their_healthy_value_show() -> None:
    conds = [
        {"type": "Ready", "status": "False", "reason": "Running", "message": "run is Running"},
        {"type": "Progressing", "status": "False", "reason": "ItemsUnresolved",
         "message": "stage ifu: ConfigMap physics/nights does not exist"},
        {"type": "Failed", "status": "True", "reason": "StageFailed", "message": "stage a"},
        {"type": "Invalid", "status": "False", "reason": "Valid", "message": ""},
        {"type": "CapacityLimited", "status": "Unknown", "reason": "NotChecked"},
        {"type": "ReconcileError", "status": "True", "reason": "ReconcileFailing",
         "message": "3 reconcile passes in a row failed"},
        {"type": "ReconcileError", "status": "False", "reason": "Recovered", "message": ""},
    ]
    assert [c["type"] for c in pr.not_ok(conds)] == ["Progressing", "Failed",
                                                     "CapacityLimited", "ReconcileError"]
    run = {"metadata": {"name": "r", "namespace": "ns", "generation": 3},
           "spec": {"stages": [{"name": "a"}], "suspend": True},
           "status": {"phase": "Failed", "observedGeneration": 2, "conditions": conds,
                      "cost": {"totalUSD": 12.4}}}
    s = pr.summary(run)
    assert s["stale"] and s["terminal"] and s["spec"] == {"suspend": True}
    out = render(pr.status_view(s, now=NOW))
    assert "Progressing=False ItemsUnresolved: stage ifu: ConfigMap physics/nights" in out
    assert "cost: $12.40 (per stage" in out
    assert "the operator has not caught up" in out
    run["status"]["cost"] = {"totalUSD": 12.4, "stages": [
        {"name": "a", "usedUSD": 12.4, "podSeconds": 7200, "pricedSeconds": 3600}]}
    out = render(pr.status_view(pr.summary(run), now=NOW))
    assert "cost: $12.40 +? (pod time on a pool with no known price)" in " ".join(out.split())
    assert next(x for x in out.splitlines() if x.startswith("a ")).split()[:2] == [
        "a", "Pending"]


def test_cost_reads_the_operators_status_cost() -> None:
    cost = {"billing": "perSecond", "observedAt": "2026-11-24T01:00:00Z", "totalUSD": 12.4,
            "usedUSD": 11.8, "idleUSD": 0.6, "nodeUSD": 12.4,
            "stages": [{"name": "ifu", "usedUSD": 11.8, "podSeconds": 7200, "running": 3}]}
    c = pr.cost_summary(cost)
    assert (c["total"], c["used"], c["idle"]) == (12.4, 11.8, 0.6)
    assert c["stages"] == [{"name": "ifu", "usd": 11.8, "podHours": 2.0, "running": 3}]
    out = render(pr.cost_view("r", cost))
    assert [x.split() for x in out.splitlines()[1:]] == [
        ["STAGE", "POD-HOURS", "RUNNING", "USD"], ["ifu", "2.000", "3", "11.8000"],
        ["(idle", "node", "time)", "0.6000"], ["total", "12.4000"]]
    assert "billed perSecond, as of 2026-11-24T01:00:00Z" in out
    assert "cost is not recorded" in render(pr.cost_view("r", None))


def test_cost_never_shows_unpriced_pod_time_as_free() -> None:
    cost = {"billing": "perSecond", "usedUSD": 0.5, "stages": [
        {"name": "ifu", "usedUSD": 0.5, "podSeconds": 7200, "pricedSeconds": 3600},
        {"name": "sum", "usedUSD": 0.0, "podSeconds": 360, "pricedSeconds": 0}]}
    c = pr.cost_summary(cost)
    assert [(s["usd"], s.get("unpricedHours")) for s in c["stages"]] == [(0.5, 1.0),
                                                                        (None, 0.1)]
    rows = [x.split() for x in render(pr.cost_view("r", cost)).splitlines()]
    assert ["ifu", "2.000", "0", "0.5000", "+?"] in rows and ["sum", "0.100", "0", "?"] in rows
    assert ["?:", "1.100", "pod-hours"] in [r[:3] for r in rows], rows


def finished(phase: str = "Failed", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "r", "resourceVersion": "41"},
            "spec": {"stages": [], **spec},
            "status": {"phase": phase, "rerunFailed": spec.get("rerunFailed", 0),
                       "stages": [{"name": "a", "total": 10, "succeeded": 8, "failed": 2}]}}


def test_rerun_failed_bumps_by_one_and_only_once() -> None:
    ch = ops.rerun_failed(finished(rerunFailed=2))
    assert ch.spec == {"rerunFailed": 3} and "now" in ch.message
    assert ops.merge_patch(finished(), ch.spec) == {
        "spec": {"rerunFailed": 3}, "metadata": {"resourceVersion": "41"}}
    pending = finished(rerunFailed=2)
    pending["spec"]["rerunFailed"] = 3
    assert ops.rerun_failed(pending).spec is None
    running = ops.rerun_failed(finished("Running"))
    assert running.spec == {"rerunFailed": 1} and "when the run finishes" in running.message
    ok = finished("Succeeded")
    ok["status"]["stages"][0].update(succeeded=10, failed=0)
    assert ops.rerun_failed(ok).spec is None
    tolerated = finished("Succeeded")  # failures tolerated: a rerun still makes sense
    assert ops.rerun_failed(tolerated).spec == {"rerunFailed": 1}
    with pytest.raises(ops.OpRefusedError, match="cancelled"):
        ops.rerun_failed(finished("Cancelled", cancel=True))


@pytest.mark.parametrize("reason", ["ValidationFailed", "InvalidItems"])
def test_rerun_failed_refuses_an_invalid_run_which_the_operator_never_reruns(
        reason: str) -> None:
    bad = finished()
    bad["status"]["conditions"] = [{"type": "Invalid", "status": "True", "reason": reason,
                                    "message": "spec.stages[0].forEach: gives no items"}]
    with pytest.raises(ops.OpRefusedError, match=r"is Invalid \(spec.stages\[0\].forEach: "
                       r"gives no items\): a rerun cannot resume it; fix the spec"):
        ops.rerun_failed(bad)
    # Started before a check it now fails: not Invalid, so a rerun goes on as ever.
    bad["status"]["conditions"][0].update(status="False", reason="StartedBeforeCheck")
    assert ops.rerun_failed(bad).spec == {"rerunFailed": 1}


def test_suspend_resume_cancel() -> None:
    assert ops.suspend(finished("Running")).spec == {"suspend": True}
    assert ops.suspend(finished("Running", suspend=True)).spec is None
    with pytest.raises(ops.OpRefusedError, match="Succeeded"):
        ops.suspend(finished("Succeeded"))
    assert ops.resume(finished("Suspended", suspend=True)).spec == {"suspend": False}
    assert ops.resume(finished("Running")).spec is None
    with pytest.raises(ops.OpRefusedError, match="final"):
        ops.resume(finished("Cancelled", suspend=True, cancel=True))
    assert ops.cancel(finished("Running")).spec == {"cancel": True}
    assert ops.cancel(finished("Failed")).spec == {"cancel": True}
    assert ops.cancel(finished("Cancelled", cancel=True)).spec is None
    with pytest.raises(ops.OpRefusedError, match="succeeded"):
        ops.cancel(finished("Succeeded"))
    no_rv = copy.deepcopy(finished())
    del no_rv["metadata"]["resourceVersion"]
    assert ops.merge_patch(no_rv, {"cancel": True}) == {"spec": {"cancel": True}}


def test_status_shows_a_stage_whose_pods_do_not_start() -> None:
    run = big_run()
    why = ("stage invert: 5000 pods, none ready after 95 s: pod nightly-invert-0-x7 "
           "container main: ImagePullBackOff; check spec.stages[1].image")
    run["status"]["stages"][1]["waiting"] = why
    run["status"]["conditions"] = [{"type": "Progressing", "status": "False",
                                    "reason": "PodsNotStarting", "message": why}]
    s = pr.summary(run)
    assert s["stages"][1]["waiting"] == why
    assert s["conditions"] == [{"type": "Progressing", "status": "False",
                                "reason": "PodsNotStarting", "message": why}]
    out = render(pr.status_view(s, now=NOW, width=200), width=200)
    assert f"pods not starting:\n  {why}\n" in out
    assert f"Progressing=False PodsNotStarting: {why}" in out


@pytest.mark.parametrize(("now", "said"), [
    (datetime(2026, 1, 1, 0, 5, 2, tzinfo=UTC), "started 5m00s ago"),
    # A client clock a little behind the API server's: a run just started.
    (datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC), "started 0s ago"),
    # Far behind: the stamp, never a negative or a stamp followed by "ago".
    (datetime(2025, 12, 31, 23, 0, 0, tzinfo=UTC), "started 2026-01-01T00:00:02Z"),
])
def test_the_start_reads_right_whatever_the_clients_clock(now: datetime, said: str) -> None:
    run = {"metadata": {"name": "r", "namespace": "ns"},
           "status": {"phase": "Running", "startTime": "2026-01-01T00:00:02Z", "stages": []}}
    head = render(pr.status_view(pr.summary(run), now=now)).splitlines()[0]
    assert head.endswith(f"0/0 items done  {said}"), head
