"""`kubectl nightshift items` folds a stage as the operator does: its Jobs and its status
entry, so items an earlier attempt ran read right once that attempt's Job is gone (a
clean-up of finished Jobs, a TTL)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.plan import plan
from tests.unit.test_plan import (
    T0,
    advance,
    failed,
    items_for,
    jobs_of,
    make_run,
    observe,
    stage_status,
    with_status,
)
from tests.unit.test_plugin_cli import FakeKube, call


def _retried_run() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]],
                            dict[str, Any]]:
    """Attempt 0 ran 94 of 100 items (3 and 17-19 failed, 98-99 never ran); its rerun
    has done 4 of its 6 and runs the rest. The run, the retry Job, its indexes
    ConfigMaps and the stage's status entry."""
    run = make_run()
    p = plan(observe(run, items=items_for(run, "a")))
    (job0,) = jobs_of(p)
    run = advance(run, p)
    first = failed(job0, "0-2,4-16,20-97", "3,17-19")
    run = advance(run, plan(observe(run, [first], items=items_for(run, "a"))))
    run["spec"]["rerunFailed"] = 1
    p = plan(observe(run, [first], items=items_for(run, "a"), now=T0 + timedelta(hours=2)))
    (retry,) = jobs_of(p)
    index_cms = [m for m in p.apply if m["kind"] == "ConfigMap"]
    run = advance(run, p)
    retry = with_status(retry, completedIndexes="0-3", failedIndexes="", active=2)
    p = plan(observe(run, [first, retry], items=items_for(run, "a")))
    run = advance(run, p)
    run["metadata"]["resourceVersion"] = "7"
    return run, retry, index_cms, stage_status(p, "a")


def test_items_of_an_attempt_whose_job_is_gone_read_from_the_record(
        capsys: pytest.CaptureFixture[str]) -> None:
    run, retry, index_cms, rec = _retried_run()
    assert rec["succeeded"] == 98
    cms = it.items_configmaps(it.RunRef.of(run), "a", [f"n{i:03d}" for i in range(100)],
                              last_step="main")
    # Attempt 0's Job is gone; the retry Job and its map are there.
    code, out = call(FakeKube([run, retry, *index_cms, *cms], {}),
                     "items", "nightly", "--stage", "a", "-o", "json")
    assert code == 0, out
    (st,) = json.loads(capsys.readouterr().out)["stages"]
    states = [r["state"] for r in st["items"]]
    assert states.count("succeeded") == 98 and states[0] == "succeeded"
    assert states[98] == states[99] == "unfinished"
