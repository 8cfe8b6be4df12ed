"""A running stage held at parallelism 0 says it is paused, naming the field that holds
it, on the run's Progressing condition; before, the run read as plain Running."""

from __future__ import annotations

from nightshift.pipelinerun.launch import paused as _paused
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import stage
from tests.unit.test_plan import advance, condition, items_for, jobs_of, make_run, observe


def _progressing(run: dict[str, object]) -> dict[str, object]:
    items = items_for(run, "reduce", count=4)
    first = plan(observe(run, items=items))
    (job,) = jobs_of(first)
    return condition(plan(observe(advance(run, first), [job], items=items)), "Progressing")


def test_a_stage_paused_by_spec_parallelism_names_it() -> None:
    run = make_run([stage("reduce", forEach={"range": {"from": 0, "to": 3}})],
                   parallelism={"reduce": 0})
    got = _progressing(run)
    assert (got["status"], got["reason"]) == ("True", "Paused"), got
    assert got["message"] == ("spec.parallelism.reduce is 0: stage reduce is paused (its "
                              "running pods finish, no new ones start); set it above 0 to "
                              "go on"), got


def test_a_stage_created_at_parallelism_zero_names_its_own_field() -> None:
    run = make_run([stage("reduce", forEach={"range": {"from": 0, "to": 3}}, parallelism=0)])
    assert str(_progressing(run)["message"]).startswith(
        "spec.stages[0].parallelism is 0: stage reduce is paused")


def test_a_running_stage_is_not_paused() -> None:
    run = make_run([stage("reduce", forEach={"range": {"from": 0, "to": 3}})])
    got = _progressing(run)
    assert (got["reason"], got["message"]) == ("Running", "run is Running"), got


def test_an_mpi_stage_at_parallelism_zero_is_not_called_paused() -> None:
    # Its MPIJob has workers, not a parallelism the run could hold at 0: it runs on.
    spec = PipelineRunSpec.model_validate({
        "parallelism": {"ep": 0, "reduce": 0},
        "stages": [{"name": "ep", "image": "mpi:dev", "mpi": {"workers": 2},
                    "steps": [{"name": "run", "command": ["mpirun", "ep"]}]},
                   stage("reduce", forEach={"range": {"from": 0, "to": 3}})]})
    records = [{"name": "ep", "phase": "Running"}, {"name": "reduce", "phase": "Running"}]
    assert [m.split(":")[0] for m in _paused(spec, records)] == [
        "spec.parallelism.reduce is 0"]
