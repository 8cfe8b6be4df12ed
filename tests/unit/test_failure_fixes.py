"""A failed run's Failed condition says what to change when a stage's own field caused
the failure: a Job past activeDeadlineSeconds, pods killed for memory."""

from __future__ import annotations

from nightshift.pipelinerun.plan import plan
from tests.bad_pipelineruns import stage
from tests.unit.test_plan import (
    advance,
    condition,
    failed,
    items_for,
    jobs_of,
    make_run,
    observe,
)


def _failed_message(reason: str, samples: list[dict[str, object]] | None = None) -> str:
    run = make_run([stage("reduce", forEach={"range": {"from": 0, "to": 3}})])
    items = items_for(run, "reduce", count=4)
    first = plan(observe(run, items=items))
    (job,) = jobs_of(first)
    p = plan(observe(advance(run, first), [failed(job, "0-1", "2", reason)], items=items,
                     samples={"reduce": samples or []}))
    got = condition(p, "Failed")
    assert got["status"] == "True", got
    return str(got["message"])


def test_a_stage_past_its_deadline_names_the_field() -> None:
    message = _failed_message("DeadlineExceeded")
    assert message.startswith("stage reduce: DeadlineExceeded"), message
    assert ("it ran longer than its activeDeadlineSeconds: spec.rerunFailed runs its "
            "unfinished items again, with a fresh deadline; for a longer one, or none, "
            "create a new run (stages are immutable)") in message, message


def test_pods_killed_for_memory_name_the_limit() -> None:
    message = _failed_message("FailedIndexes", [
        {"index": 2, "exitCode": 137, "reason": "OOMKilled", "message": ""}])
    assert ("its pods were killed for memory (OOMKilled): create a new run with a higher "
            "resources.limits.memory for this stage (stages are immutable)") in message, message
    assert "activeDeadlineSeconds" not in _failed_message("FailedIndexes")
