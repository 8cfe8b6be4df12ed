"""kubectl nightshift items/logs decoding: frozen item chunks, item states from the real
progress code, where a retried item ran, and which pod and container to read."""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.api import names, ranges
from nightshift.cli import plugin_items as pi
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import progress as pg

REF = it.RunRef(name="nightly", namespace="physics", uid="u1")
N = 100_000


def values(n: int) -> list[str]:
    return [f"night-{i:06d}" for i in range(n)]


def metas(cms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a metadata-only LIST returns: no data."""
    return [{"metadata": cm["metadata"]} for cm in cms]


def job(stage: str, attempt: int, completions: int, done: str = "", bad: str = "",
        cond: str | None = None, reason: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"completedIndexes": done, "failedIndexes": bad}
    if cond:
        status["conditions"] = [{"type": cond, "status": "True", "reason": reason}]
    return {"metadata": {"name": it.job_name("nightly", stage, attempt),
                         "labels": {names.LABEL_RUN: "nightly", names.LABEL_STAGE: stage,
                                    names.LABEL_ATTEMPT: str(attempt)}},
            "spec": {"completions": completions}, "status": status}


def test_100k_items_decode_from_the_real_chunks() -> None:
    cms = it.items_configmaps(REF, "split", values(N), last_step="main")
    assert len(cms) >= 2, "100k items of 13 bytes must span more than one 900 KB chunk"
    retry = it.indexes_configmaps(REF, "split", 1, [5, 7])
    chunks = pi.item_chunks(metas(cms + retry), "nightly", "split")
    assert [c.name for c in chunks] == [cm["metadata"]["name"] for cm in cms]
    assert sum(c.count for c in chunks) == N and chunks[0].start == 0
    second = chunks[1].start
    # Only the chunks holding the wanted indexes are read.
    assert pi.chunks_for(chunks, [3, 17]) == [chunks[0]]
    assert pi.chunks_for(chunks, [second]) == [chunks[1]]
    assert pi.chunks_for(chunks, [0, N - 1]) == [chunks[0], chunks[-1]]
    assert pi.chunks_for(chunks, [N + 5]) == []
    assert pi.chunks_for(chunks, None) == chunks
    items = pi.ItemList(cms)
    assert len(items) == N
    for i in (0, second - 1, second, N - 1):
        assert items.get(i) == f"night-{i:06d}"
    assert items.get(N) is None
    assert items.index_of("night-099999") == N - 1
    assert items.index_of(f"night-{second:06d}") == second
    assert items.index_of("night-100000") is None
    # A partial read answers only for the chunk it has.
    part = pi.ItemList([cms[1]])
    assert part.get(second) == f"night-{second:06d}" and part.get(0) is None


def test_a_stage_without_chunks_yet_has_none() -> None:
    assert pi.item_chunks([], "nightly", "split") == []
    other = it.items_configmaps(REF, "invert", values(3), last_step="main")
    assert pi.item_chunks(metas(other), "nightly", "split") == []


def retried_view() -> pg.StageView:
    """10 items: attempt 0 finished 0-6, failed 7-8 and never ran 9 (stopped early);
    the rerun (attempt 1) runs [7, 8, 9]: 7 done, 9 failed, 8 still going."""
    jobs = {0: job("split", 0, 10, "0-6", "7-8", "Failed", "MaxFailedIndexesExceeded"),
            1: job("split", 1, 3, "0", "2")}
    return pg.stage_view(jobs, 10, 1)


def test_states_follow_the_latest_attempt() -> None:
    view = retried_view()
    rec = {"name": "split", "phase": "Running", "attempt": 1, "total": 10}
    states = pi.states(10, rec, view)
    assert states[:8] == [pi.SUCCEEDED] * 8
    assert states[8] == pi.UNFINISHED and states[9] == pi.FAILED
    # Attempt 0 alone, ended: the item it never ran is not-run, not unfinished.
    view0 = pg.stage_view({0: job("split", 0, 10, "0-6", "7-8", "Failed",
                                  "MaxFailedIndexesExceeded")}, 10, 1)
    ended = pi.states(10, {"name": "split", "phase": "Failed", "attempt": 0}, view0)
    assert ended[9] == pi.NOT_RUN and ended[7] == pi.FAILED and ended[0] == pi.SUCCEEDED
    assert pi.states(4, {"name": "x"}, None) == [pi.PENDING] * 4
    done = {"name": "x", "phase": "Succeeded", "attempt": 0, "total": 4, "succeeded": 4}
    assert pi.trivially_succeeded(done)
    assert pi.states(4, done, None) == [pi.SUCCEEDED] * 4
    with pytest.raises(ValueError):
        pi.states(10, rec, None)
    # The Jobs were deleted: failures the status lists are known, the rest is not.
    gone = {"name": "x", "phase": "Running", "attempt": 0, "total": 5, "failedItems": "1,3"}
    assert pi.states(5, gone, pg.StageView(total=5)) == [
        pi.UNKNOWN, pi.FAILED, pi.UNKNOWN, pi.FAILED, pi.UNKNOWN]


def test_states_at_100k_items() -> None:
    failed = list(range(0, N, 10))
    done = ranges.compress(sorted(set(range(N // 2)) - set(failed)))
    view = pg.stage_view({0: job("split", 0, N, done, ranges.compress(failed[:5000]))}, N,
                         10_000)
    states = pi.states(N, {"name": "split", "phase": "Running", "attempt": 0}, view)
    assert states.count(pi.SUCCEEDED) == N // 2 - 5000
    assert states.count(pi.FAILED) == 5000
    assert states.count(pi.UNFINISHED) == N // 2
    assert states[10] == pi.FAILED and states[11] == pi.SUCCEEDED
    assert states[N - 1] == pi.UNFINISHED


def test_failed_from_status_unless_truncated() -> None:
    assert pi.failed_from_status({"failedItems": "3,17-19"}) == [3, 17, 18, 19]
    assert pi.failed_from_status({}) == []
    assert pi.failed_from_status({"failedItems": "3", "failedItemsTruncated": True}) is None


def test_rows_carry_samples_and_format_plainly() -> None:
    cms = it.items_configmaps(REF, "split", values(20), last_step="main")
    rec = {"failureSamples": [{"index": 17, "exitCode": 2, "reason": "Error",
                               "message": "no such file: night-000017.fits"}]}
    rows = pi.item_rows(pi.ItemList(cms), [3, 17], None, rec)
    assert rows[0] == {"index": 3, "item": "night-000003", "state": "failed"}
    assert rows[1]["exitCode"] == 2 and rows[1]["reason"] == "Error"
    lines = list(pi.format_rows(rows))
    assert lines[0].split() == ["INDEX", "STATE", "ITEM"]
    assert lines[1].split() == ["3", "failed", "night-000003"]
    assert lines[2].endswith("night-000017  exit 2 Error: no such file: night-000017.fits")
    states = [pi.SUCCEEDED] * 20
    assert pi.item_rows(pi.ItemList([]), [5], states, {})[0] == {
        "index": 5, "item": None, "state": "succeeded"}


def test_locate_maps_an_item_to_its_retry_job_and_completion_index() -> None:
    view = retried_view()
    assert pi.locate(view, 9) == pi.Where(1, it.job_name("nightly", "split", 1), 2)
    assert pi.locate(view, 7).completion_index == 0
    # Item 3 succeeded in attempt 0, so that is the latest attempt that ran it.
    assert pi.locate(view, 3) == pi.Where(0, it.job_name("nightly", "split", 0), 3)
    assert pi.locate(view, 8, attempt=0).completion_index == 8
    with pytest.raises(LookupError, match="not run by attempt 1"):
        pi.locate(view, 3, attempt=1)
    with pytest.raises(LookupError, match="attempts are 0, 1"):
        pi.locate(view, 3, attempt=4)
    with pytest.raises(LookupError, match="beyond"):
        pi.locate(view, 10)
    with pytest.raises(LookupError, match="no Job"):
        pi.locate(pg.StageView(total=3), 0)
    sel = pi.pod_selector("nightly", "split", pi.locate(view, 9))
    assert sel == ("batch.kubernetes.io/job-completion-index=2,nightshift.io/attempt=1,"
                   "nightshift.io/pipeline-run=nightly,nightshift.io/stage=split")


def test_stage_jobs_keep_only_our_names() -> None:
    mine = job("split", 0, 3)
    fake = job("split", 1, 3)
    fake["metadata"]["name"] = "nightly-split-r1-lookalike"
    other = job("invert", 0, 3)
    assert pi.stage_jobs([mine, fake, other], "nightly", "split") == {0: mine}


def pod(name: str, created: str, init: list[tuple[str, int | None]],
        main: tuple[str, int | None], last: bool = False) -> dict[str, Any]:
    key = "lastState" if last else "state"

    def status(n: str, code: int | None) -> dict[str, Any]:
        st = {"terminated": {"exitCode": code}} if code is not None else {"running": {}}
        return {"name": n, key: st}

    return {"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"initContainers": [{"name": n} for n, _ in init],
                     "containers": [{"name": main[0]}]},
            "status": {"initContainerStatuses": [status(n, c) for n, c in init],
                       "containerStatuses": [status(*main)]}}


def test_the_failing_step_is_the_default_container() -> None:
    p = pod("p", "t", [("nightshift-stage-in", 0), ("copy", 0), ("split", 3)], ("concat", None))
    assert pi.pick_container(p) == "split"
    ok = pod("p", "t", [("copy", 0)], ("concat", 0))
    assert pi.pick_container(ok) == "concat"
    assert pi.container_names(p) == ["nightshift-stage-in", "copy", "split", "concat"]
    prev = pod("p", "t", [("copy", 0)], ("concat", 137), last=True)
    assert pi.pick_container(prev, previous=True) == "concat"
    assert pi.pick_container({"spec": {}}) is None


def test_newest_pod_of_an_index() -> None:
    a = pod("nightly-split-x-3-aaaaa", "2025-03-01T12:00:00Z", [], ("main", 1))
    b = pod("nightly-split-x-3-bbbbb", "2025-03-01T12:05:00Z", [], ("main", 0))
    assert pi.newest_pod([a, b]) is b and pi.newest_pod([b, a]) is b
    assert pi.newest_pod([]) is None
