"""A stage's exact succeeded items, kept in its done-set ConfigMap where the status's
2-KiB `succeededItems` is cut (pipelinerun/doneset.py): a retry or a lost Job's
replacement whose Jobs before it are gone runs exactly what did not succeed."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nightshift.api import names, ranges
from nightshift.config import OperatorConfig
from nightshift.kube import KubeError
from nightshift.pipelinerun import doneset
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun.observe import read_done as _read_done
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.reconcile import _keep_done
from tests.bad_pipelineruns import stage
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import (
    advance,
    failed,
    items_for,
    jobs_of,
    make_run,
    observe,
    stage_status,
    start_a,
    with_status,
)

N = 10_000
BAD = [i for i in range(N) if i % 7 == 3]  # 1,429 scattered failures: no 2 KiB holds it
GOOD = [i for i in range(N) if i % 7 != 3]


def _failed_run() -> tuple[dict[str, Any], dict[str, Any], str]:
    """Stage a of N items ended Failed with BAD failed; the status record is cut."""
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": N - 1}})])
    items = items_for(run, "a", count=N)
    p, job = start_a(run)
    run = advance(run, p)
    first = failed(job, ranges.compress(GOOD), ranges.compress(BAD))
    first["metadata"]["uid"] = "uid-0"
    p = plan(observe(run, [first], items=items))
    a = stage_status(p, "a")
    assert a["phase"] == "Failed" and a["succeededItemsTruncated"] is True
    # The exact set goes with the status, for the ConfigMap.
    assert p.done == {"a": ranges.compress(GOOD)}
    return advance(run, p), first, p.done["a"]


def _retry_indexes(run: dict[str, Any], done_items: dict[str, str]) -> list[int]:
    run = {**run, "spec": {**run["spec"], "rerunFailed": 1}}
    p = plan(replace(observe(run, [], items=items_for(run, "a", count=N)),
                     done_items=done_items))
    cms = [m for m in p.apply if m["kind"] == "ConfigMap"]
    (retry,) = jobs_of(p)
    indexes = [int(x) for c in cms for v in c["data"].values() for x in v.split()]
    assert retry["spec"]["completions"] == len(indexes)
    return indexes


def test_a_rerun_whose_jobs_are_gone_runs_exactly_the_failed_items() -> None:
    run, _, text = _failed_run()
    # Without the done set, the cut record makes the retry run succeeded items again.
    assert len(_retry_indexes(run, {})) > len(BAD)
    assert _retry_indexes(run, {"a": text}) == BAD


def test_a_lost_job_with_a_cut_record_is_replaced_for_exactly_the_unfinished_items() -> None:
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": N - 1}})])
    items = items_for(run, "a", count=N)
    p, job = start_a(run)
    run = advance(run, p)
    seen = with_status(job, active=10, completedIndexes=ranges.compress(GOOD))
    seen["metadata"]["uid"] = "uid-0"
    p = plan(observe(run, [seen], items=items))
    assert stage_status(p, "a")["succeededItemsTruncated"] is True
    text = p.done["a"]
    run = advance(run, p)
    # The Job is deleted mid-run, its pods gone: the replacement runs BAD only.
    p = plan(replace(observe(run, [], items=items), done_items={"a": text}))
    (repl,) = jobs_of(p)
    assert repl["spec"]["completions"] == len(BAD)
    assert stage_status(p, "a")["succeeded"] == len(GOOD)


def test_an_uncut_record_needs_no_done_set() -> None:
    run = make_run()
    p, job = start_a(run)
    run = advance(run, p)
    p = plan(observe(run, [with_status(job, active=10, completedIndexes="0-39,50-59")],
                     items=items_for(run, "a")))
    assert p.done == {}


def test_a_damaged_done_set_claims_nothing_and_a_huge_one_is_cut_never_overclaims() -> None:
    assert pg.stage_view({}, 10, None, done_ranges="0-3,x").succeeded == set()
    assert pg.stage_view({}, 10, None, done_ranges="0-3,8-12").succeeded == {0, 1, 2, 3, 8, 9}
    every_other = range(0, 1_000_000, 2)  # 500,000 scattered items: over a ConfigMap's MiB
    text = doneset.record(every_other)
    assert len(text) <= doneset.CHARS
    assert set(ranges.parse(text)) < set(every_other)
    assert doneset.record(GOOD) == ranges.compress(GOOD)  # exact while it fits


def test_a_tolerated_retry_whose_first_jobs_are_gone_succeeds() -> None:
    """The done set counts before the tolerance is judged: 5 failures of 10 allowed."""
    run = make_run([stage("a", forEach={"range": {"from": 0, "to": N - 1}},
                          tolerateFailedItems=10)])
    items = items_for(run, "a", count=N)
    p, job = start_a(run)
    run = advance(run, p)
    first = failed(job, ranges.compress(GOOD), ranges.compress(BAD))
    first["metadata"]["uid"] = "uid-0"
    p = plan(observe(run, [first], items=items))
    text = p.done["a"]
    run = advance(run, p)
    run = {**run, "spec": {**run["spec"], "rerunFailed": 1}}
    p = plan(replace(observe(run, [], items=items), done_items={"a": text}))
    (retry,) = jobs_of(p)
    run = advance(run, p)
    n = retry["spec"]["completions"]
    r = failed(retry, f"5-{n - 1}", "0-4")
    r["metadata"]["uid"] = "uid-1"
    p = plan(replace(observe(run, [r], items=items), done_items={"a": text}))
    a = stage_status(p, "a")
    assert (a["phase"], a["succeeded"], a["failed"]) == ("Succeeded", N - 5, 5)
    assert p.status["phase"] == "Succeeded"


def _run_with_cut_record() -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": "nightly", "namespace": "physics", "uid": "u1"},
            "status": {"stages": [{"name": "a", "succeededItemsTruncated": True},
                                  {"name": "b", "succeededItems": "0-9"}]}}


def test_the_done_set_is_read_once_per_loop_and_only_if_the_runs_own() -> None:
    run = _run_with_cut_record()
    ours = doneset.render(it.RunRef.of(run), "a", "0-5")
    kube = RecordingKube([ours])
    cache: dict[str, str] = {}
    _read_done(kube, run, cache)
    assert cache == {"a": "0-5"}  # b's record is whole: not read
    kube.store.clear()
    _read_done(kube, run, cache)
    assert cache == {"a": "0-5"}  # read once, kept
    # An earlier same-named run's ConfigMap (another uid) is not this run's record.
    kube = RecordingKube([{**ours, "metadata": {
        **ours["metadata"], "ownerReferences": [{**ours["metadata"]["ownerReferences"][0],
                                                 "uid": "earlier"}]}}])
    cache = {}
    _read_done(kube, run, cache)
    assert cache == {"a": ""}


def test_the_done_set_is_written_when_it_changed_and_a_refusal_is_said_once() -> None:
    run = _run_with_cut_record()
    kube = RecordingKube()
    cache: dict[str, str] = {}
    assert _keep_done(kube, run, {"a": "0-5"}, cache, set()) == []
    path = kube.path("v1", "ConfigMap", "physics", doneset.configmap_name("nightly", "a"))
    cm = kube.store[path]
    assert cm["data"] == {doneset.KEY: "0-5"}
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "u1"
    version = cm["metadata"]["resourceVersion"]
    _keep_done(kube, run, {"a": "0-5"}, cache, set())
    assert kube.store[path]["metadata"]["resourceVersion"] == version  # unchanged: no write

    class Refusing(RecordingKube):
        def apply(self, obj: Mapping[str, Any], force: bool = True,
                  subresource: str | None = None) -> dict[str, Any]:
            raise KubeError(403, "Forbidden", 'configmaps "x" is forbidden: exceeded quota')

    refused: set[str] = set()
    first = _keep_done(Refusing(), run, {"a": "0-6"}, cache, refused)
    assert [e.reason for e in first] == ["DoneSetNotKept"]
    assert "exceeded quota" in first[0].message and "stage a" in first[0].message
    assert _keep_done(Refusing(), run, {"a": "0-7"}, cache, refused) == []  # said once
    assert cache["a"] == "0-5"  # not taken as kept: tried again next pass

    class Unreachable(RecordingKube):
        def apply(self, obj: Mapping[str, Any], force: bool = True,
                  subresource: str | None = None) -> dict[str, Any]:
            raise KubeError(503, "ServiceUnavailable", "try again")

    try:
        _keep_done(Unreachable(), run, {"a": "0-8"}, cache, refused)
    except KubeError:
        pass
    else:
        raise AssertionError("a transient error must fail the pass (retried)")
    assert cache["a"] == "0-5"  # not taken as kept


CONFIG = OperatorConfig(runner_image="runner:dev")
RUN_PATH = RecordingKube().path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")


def _failing_stage_run(uid: str = "u1") -> dict[str, Any]:
    run = make_run([{"name": "a", "image": "busybox:1.36",
                     "forEach": {"range": {"from": 0, "to": N - 1}},
                     "steps": [{"name": "main", "command": ["true"]}]}])
    run["metadata"]["uid"] = uid
    return run


def _pass(kube: RecordingKube, state: pipelinerun.LoopState) -> None:
    pipelinerun.reconcile(kube, CONFIG, "physics", "nightly", state)


def _first_attempt_fails(kube: RecordingKube, state: pipelinerun.LoopState
                         ) -> dict[str, Any]:
    """The run's first pass makes stage a's Job; it ends with BAD failed; the Job."""
    _pass(kube, state)
    (job,) = [o for o in kube.store.values() if o["kind"] == "Job"]
    job["status"] = failed(job, ranges.compress(GOOD), ranges.compress(BAD))["status"]
    return dict(job)


def test_reconcile_keeps_the_done_set_and_a_restarted_operator_reruns_exactly_the_failed(
) -> None:
    """The passes' I/O: the set written with the status, read back after a restart."""
    kube = RecordingKube([_failing_stage_run()])
    state = pipelinerun.LoopState()
    job = _first_attempt_fails(kube, state)
    _pass(kube, state)
    (a,) = kube.store[RUN_PATH]["status"]["stages"]
    assert (a["phase"], a["succeededItemsTruncated"]) == ("Failed", True)
    cm = kube.store[kube.path("v1", "ConfigMap", "physics",
                              doneset.configmap_name("nightly", "a"))]
    assert cm["data"][doneset.KEY] == ranges.compress(GOOD)
    # A TTL removes the Job; the operator restarts; a rerun is asked for.
    del kube.store[kube.path("batch/v1", "Job", "physics", job["metadata"]["name"])]
    kube.store[RUN_PATH]["spec"]["rerunFailed"] = 1
    _pass(kube, pipelinerun.LoopState())
    (retry,) = [o for o in kube.store.values() if o["kind"] == "Job"]
    assert retry["spec"]["completions"] == len(BAD)


def test_a_done_set_whose_write_failed_is_written_by_a_later_pass_that_changes_nothing(
) -> None:
    class Flaky(RecordingKube):
        fail = 1

        def apply(self, obj: Mapping[str, Any], force: bool = True,
                  subresource: str | None = None) -> dict[str, Any]:
            if obj["metadata"]["name"] == doneset.configmap_name("nightly", "a") and self.fail:
                self.fail -= 1
                raise KubeError(503, "ServiceUnavailable", "etcd leader change")
            return super().apply(obj, force=force, subresource=subresource)

    kube = Flaky([_failing_stage_run()])
    state = pipelinerun.LoopState()
    _first_attempt_fails(kube, state)
    with contextlib.suppress(KubeError):  # after the status write: the engine retries
        _pass(kube, state)
    assert kube.store[RUN_PATH]["status"]["phase"] == "Failed"
    for _ in range(3):  # the engine's retries, then an operator restart: nothing to write
        _pass(kube, state)
    _pass(kube, pipelinerun.LoopState())
    cm_path = kube.path("v1", "ConfigMap", "physics", doneset.configmap_name("nightly", "a"))
    assert kube.store[cm_path]["data"][doneset.KEY] == ranges.compress(GOOD)


def test_a_run_recreated_under_its_name_in_the_same_loop_inherits_nothing() -> None:
    """Deleted and created again while the watch re-listed (no DELETED event): the same
    loop and LoopState serve a new uid."""
    kube = RecordingKube([_failing_stage_run("u1")])
    state = pipelinerun.LoopState()
    _first_attempt_fails(kube, state)
    _pass(kube, state)
    assert state.done
    kube.store.clear()
    kube.put(_failing_stage_run("u2"))
    _pass(kube, state)
    _pass(kube, state)
    (a,) = kube.store[RUN_PATH]["status"]["stages"]
    assert not a.get("succeeded") and not a.get("succeededItemsTruncated"), a
