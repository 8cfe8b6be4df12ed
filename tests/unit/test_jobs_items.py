"""#12 in the rendered Jobs: a matrix stage (its fields reach every container) and a
gathering stage (the gathered stage's items ConfigMaps reach its stage-in); golden files
and the plan that passes the ConfigMaps on."""

from __future__ import annotations

import json
from typing import Any

from nightshift.api import names
from nightshift.api.runnerwire import RunnerConfig, gather_dir
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import jobs, runnerparts, validate
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import ItemsInfo
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import run as manifest
from tests.bad_pipelineruns import stage
from tests.golden_util import check_golden
from tests.unit.test_plan import complete, jobs_of, make_run, observe

RUN = it.RunRef(name="broadband", namespace="seismo", uid="uid-1")
STORAGE = [{"name": "sims", "s3": {"bucket": "science-runs", "prefix": "v22/",
                                   "credentialsSecret": "scec-keys"}}]
SOURCES = ["northridge", "loma-prieta", "landers", "whittier", "chino-hills", "la-habra"]
SITES = ["LAX", "PAS", "USC", "SMO", "PDE", "WLT", "LLS", "CHN"]

BROADBAND = stage(
    "simulate",
    forEach={"matrix": {"source": SOURCES, "site": SITES}},
    image="scec/bbp:22.4",
    steps=[{"name": "bbp", "command": ["run_bbp.py"],
            "args": ["--src", "{source}", "--station={site}", "--seed", "{index}",
                     "{item}", "{literal}"]}],
    inputs=[{"storage": "sims", "path": "sources/{source}.src"}],
    outputs=[{"storage": "sims", "path": "out/{source}/{site}/"}],
)


def job_of(st: dict[str, Any], completions: int, *, others: list[dict[str, Any]] | None = None,
           gather: dict[str, list[str]] | None = None, run: it.RunRef = RUN) -> dict[str, Any]:
    sp = PipelineRunSpec.model_validate(manifest([*(others or []), st],
                                                 storage=STORAGE)["spec"])
    assert validate.validate_spec(sp, run.name) == []
    return jobs.render_job(
        run=run, spec=sp, stage=sp.stages[-1], attempt=0, completions=completions,
        item_configmaps=[it.items_configmap_name(run.name, sp.stages[-1].name, 0)],
        parallelism=20, suspend=False, runner_image="nightshift/runner:dev",
        gather_configmaps=gather)


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    pod = job["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in c["env"]}


def runner_config(job: dict[str, Any]) -> RunnerConfig:
    stage_in = next(c for c in containers(job)
                    if c["name"] == runnerparts.STAGE_IN_CONTAINER)
    return RunnerConfig.loads(env(stage_in)[names.ENV_RUNNER_CONFIG])


def test_golden_matrix_job() -> None:
    job = job_of(BROADBAND, 48)
    check_golden("pipelinerun/job-matrix.yaml", job)
    # Every container, runner and step alike, splits the item by the same field names.
    for c in containers(job):
        assert env(c)[names.ENV_ITEM_FIELDS] == "site source", c["name"]
    step = containers(job)[-1]
    # Placeholders stay in the template: run.sh replaces them per pod.
    assert step["command"][-7:] == ["--src", "{source}", "--station={site}", "--seed",
                                    "{index}", "{item}", "{literal}"]


def test_matrix_items_are_the_product_in_field_name_order() -> None:
    sp = PipelineRunSpec.model_validate(manifest([BROADBAND], storage=STORAGE)["spec"])
    items = it.item_list(sp.stages[0].for_each)
    assert len(items) == 48
    assert items[:3] == ["LAX/northridge", "LAX/loma-prieta", "LAX/landers"]
    assert items[-1] == "CHN/la-habra"


def test_no_fields_env_without_a_matrix() -> None:
    plain = {**BROADBAND, "forEach": {"items": ["a"]},
             "outputs": [{"storage": "sims", "path": "out/{item}/"}],
             "inputs": [], "steps": [{"name": "bbp", "command": ["true"]}]}
    job = job_of(plain, 1)
    assert all(names.ENV_ITEM_FIELDS not in env(c) for c in containers(job))


def test_matrix_outputs_need_every_field_or_the_item() -> None:
    one_field = {**BROADBAND, "outputs": [{"storage": "sims", "path": "out/{site}/"}]}
    sp = PipelineRunSpec.model_validate(manifest([one_field], storage=STORAGE)["spec"])
    assert any("outputs[0].path" in str(p) and "has no {item}" in str(p)
               for p in validate.validate_spec(sp, RUN.name))


# --- gather (CHILES: 42 days split into 120 sub-bands, then one image per sub-band) ---------

SPLIT = stage("split", forEach={"range": {"from": 1, "to": 42, "format": "day-{:02d}"}},
              image="chiles/casa:6.6", steps=[{"name": "split", "command": ["mstransform"]}],
              outputs=[{"storage": "sims", "path": "split/{item}/"}])
IMAGE = stage(
    "image", dependsOn=["split"],
    forEach={"range": {"from": 1, "to": 120, "format": "{:03d}"}},
    image="chiles/casa:6.6", steps=[{"name": "clean", "command": ["tclean", "band-{item}"]}],
    inputs=[{"storage": "sims", "path": "split/{gather}/band-{item}.ms/", "gather": "split",
             "localPath": "days"}],
    outputs=[{"storage": "sims", "path": "cube/band-{item}/"}],
)
CHILES = it.RunRef(name="chiles", namespace="radio", uid="uid-2")
SPLIT_CMS = [it.items_configmap_name(CHILES.name, "split", n) for n in range(2)]


def test_golden_gather_job() -> None:
    job = job_of(IMAGE, 120, others=[SPLIT], gather={"split": SPLIT_CMS}, run=CHILES)
    check_golden("pipelinerun/job-gather.yaml", job)
    pod = job["spec"]["template"]["spec"]
    vol = next(v for v in pod["volumes"] if v["name"] == "nightshift-gather-split")
    assert [s["configMap"]["name"] for s in vol["projected"]["sources"]] == SPLIT_CMS
    mounted = {c["name"]: [m["mountPath"] for m in c["volumeMounts"]] for c in containers(job)}
    # Only the stage-in reads it: the steps see the staged copies, not the list.
    assert [n for n, ms in mounted.items() if gather_dir("split") in ms] == \
        [runnerparts.STAGE_IN_CONTAINER]
    [ref] = runner_config(job).inputs
    assert (ref.gather, ref.path, ref.local_path) == ("split", "split/{gather}/band-{item}.ms/",
                                                      "days")


def test_runner_config_json_has_no_gather_key_without_gather() -> None:
    job = job_of(BROADBAND, 48)
    raw = json.loads(env(containers(job)[0])[names.ENV_RUNNER_CONFIG])
    assert all("gather" not in d for d in raw["inputs"] + raw["outputs"])


def test_a_required_output_reaches_the_runner() -> None:
    st = {**BROADBAND, "outputs": [{"storage": "sims", "path": "out/{source}/{site}/",
                                    "required": True}]}
    [ref] = runner_config(job_of(st, 48)).outputs
    assert ref.required


def test_plan_passes_the_gathered_stages_frozen_configmaps() -> None:
    run = make_run([SPLIT, IMAGE], storage=STORAGE)
    split_cms = [it.items_configmap_name("nightly", "split", n) for n in range(2)]
    items = {"split": ItemsInfo(42, tuple(split_cms)),
             "image": ItemsInfo(120, (it.items_configmap_name("nightly", "image", 0),))}
    first = plan(observe(run, items=items))
    (split_job,) = jobs_of(first)
    run["status"] = first.status
    p = plan(observe(run, [complete(split_job)], items=items))
    (image_job,) = jobs_of(p)
    vol = next(v for v in image_job["spec"]["template"]["spec"]["volumes"]
               if v["name"] == "nightshift-gather-split")
    assert [s["configMap"]["name"] for s in vol["projected"]["sources"]] == split_cms
