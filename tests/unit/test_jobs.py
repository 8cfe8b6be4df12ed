"""The rendered Indexed Job, checked field by field and against golden files."""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import jobs, rangeitem
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import run as manifest
from tests.bad_pipelineruns import stage
from tests.golden_util import check_golden

RUN = it.RunRef(name="nightly", namespace="physics", uid="uid-1")


def spec(**stage_kw: Any) -> PipelineRunSpec:
    st = stage("ifu", **stage_kw)
    return PipelineRunSpec.model_validate(manifest([st])["spec"])


def render(sp: PipelineRunSpec, attempt: int = 0, completions: int = 700,
           **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "run": RUN, "spec": sp, "stage": sp.stages[0], "attempt": attempt,
        "completions": completions,
        "item_configmaps": [it.items_configmap_name("nightly", "ifu", 0)],
        "parallelism": 40, "suspend": False, "runner_image": "nightshift/runner:dev"}
    args.update(kw)
    return jobs.render_job(**args)


NIGHTLY = {
    "forEach": {"range": {"from": 1, "to": 700, "format": "night-{:04d}"}},
    "pool": "workers",
    "image": "snfactory/ifu:2024.1",
    "steps": [
        {"name": "fetch", "command": ["fetch-night"], "args": ["--night"],
         "env": [{"name": "MODE", "value": "fast"}]},
        {"name": "reduce", "command": ["reduce", "--all"]},
    ],
    "env": [{"name": "MODE", "value": "slow"}, {"name": "OMP_NUM_THREADS", "value": "1"}],
    "resources": {"requests": {"cpu": "1", "memory": "3Gi"}},
    "retries": {"perItem": 3, "permanentExitCodes": [3, 2]},
    "tolerateFailedItems": 2,
    "podAnnotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "5s"},
}


def test_golden_nightly_job() -> None:
    check_golden("pipelinerun/job-nightly.yaml", render(spec(**NIGHTLY)))


def test_golden_retry_job_and_its_indexes() -> None:
    cms = it.indexes_configmaps(RUN, "ifu", 1, [3, 17, 18, 19])
    job = render(spec(**NIGHTLY), attempt=1, completions=4, rerun=1,
                 indexes_configmaps=[c["metadata"]["name"] for c in cms])
    check_golden("pipelinerun/job-nightly-retry.yaml", [*cms, job])


def test_golden_items_configmap() -> None:
    cms = it.items_configmaps(RUN, "ifu", it.item_list(spec(**NIGHTLY).stages[0].for_each)[:5],
                              last_step="reduce")
    check_golden("pipelinerun/items-configmap.yaml", cms)


def test_job_fields() -> None:
    job = render(spec(**NIGHTLY))
    s = job["spec"]
    assert s["completionMode"] == "Indexed" and s["completions"] == 700
    assert s["parallelism"] == 40 and s["backoffLimitPerIndex"] == 3
    assert s["maxFailedIndexes"] == 2 and s["suspend"] is False
    rules = s["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1] == {"action": "FailIndex",
                        "onExitCodes": {"operator": "In", "values": [2, 3]}}
    pod = s["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert [c["name"] for c in pod["initContainers"]] == ["fetch"]
    assert [c["name"] for c in pod["containers"]] == ["reduce"]
    # A range stage's first attempt: the inline wrapper, given the run's identity and
    # the range as arguments, and no items volume (rangeitem.py).
    assert pod["containers"][0]["command"] == [
        "/bin/sh", "-c", rangeitem.RANGE_SH, rangeitem.ARGV0, "nightly", "ifu", "physics",
        "reduce", "1", "1", "night-", "%04d", "", "--", "reduce", "--all"]
    assert [v["name"] for v in pod["volumes"]] == ["nightshift-work"]
    assert all([m["name"] for m in c["volumeMounts"]] == ["nightshift-work"]
               for c in [*pod["initContainers"], *pod["containers"]])
    env = {e["name"]: e["value"] for e in pod["initContainers"][0]["env"]}
    assert env["MODE"] == "fast" and env["OMP_NUM_THREADS"] == "1"
    # A first attempt's identity is in the wrapper's arguments, not in each pod's env.
    assert not any(k.startswith("NIGHTSHIFT_") for k in env)
    retry = render(spec(**NIGHTLY), attempt=2)
    rpod = retry["spec"]["template"]["spec"]
    # A retry keeps run.sh and the volume: its indexes map completion index to item.
    assert rpod["containers"][0]["command"] == [
        "/bin/sh", f"{names.MOUNT_ITEMS}/run.sh", "reduce", "--", "reduce", "--all"]
    assert [v["name"] for v in rpod["volumes"]] == ["nightshift-items", "nightshift-work"]
    renv = {e["name"]: e["value"] for e in rpod["containers"][0]["env"]}
    assert renv[names.ENV_RUN] == "nightly" and renv[names.ENV_STAGE] == "ifu"
    assert renv[names.ENV_NAMESPACE] == "physics" and renv[names.ENV_LAST_STEP] == "reduce"
    assert renv[names.ENV_ATTEMPT] == "2"
    assert pod["nodeSelector"] == {names.LABEL_POOL: "workers"}
    assert pod["tolerations"] == [{"key": names.TAINT_POOL, "operator": "Equal",
                                   "value": "workers", "effect": "NoSchedule"}]
    meta = s["template"]["metadata"]
    assert meta["annotations"][names.ANNOTATION_DO_NOT_DISRUPT] == "true"
    assert meta["labels"][names.LABEL_ATTEMPT] == "0"
    assert job["metadata"]["ownerReferences"][0]["controller"] is True
    assert len(f"{job['metadata']['name']}-99999") <= 63


def test_the_item_is_never_in_the_command() -> None:
    job = render(spec(forEach={"items": ["$(reboot)"]}), completions=1)
    assert "$(reboot)" not in str(job)


def test_api_token_only_with_a_named_service_account() -> None:
    pod = render(spec())["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    named = render(spec(serviceAccountName="pipelines"))["spec"]["template"]["spec"]
    # The named account's own setting decides (IRSA and node-reader RBAC need it).
    assert named["serviceAccountName"] == "pipelines"
    assert "automountServiceAccountToken" not in named


def test_no_failure_budget_without_tolerate_and_no_exit_code_rule() -> None:
    s = render(spec())["spec"]
    assert "maxFailedIndexes" not in s
    assert len(s["podFailurePolicy"]["rules"]) == 1
    assert "initContainers" not in s["template"]["spec"]


def test_api_limits_are_respected() -> None:
    small = render(spec(tolerateFailedItems=50), attempt=1, completions=4, parallelism=10**6)
    assert small["spec"]["maxFailedIndexes"] == 4 and small["spec"]["parallelism"] == 4
    big = render(spec(tolerateFailedItems=5), completions=200_000, parallelism=50_000)
    assert big["spec"]["parallelism"] == 10_000


def test_suspend_passthrough_and_rerun_annotation() -> None:
    job = render(spec(), attempt=2, suspend=True, rerun=7)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["annotations"] == {names.ANNOTATION_RERUN: "7"}
    assert job["metadata"]["name"] == it.job_name("nightly", "ifu", 2)


def test_merge_env_later_wins_in_first_seen_order() -> None:
    got = jobs.merge_env([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                         [{"name": "A", "value": "3"}])
    assert got == [{"name": "A", "value": "3"}, {"name": "B", "value": "2"}]


def test_a_step_may_have_its_own_image() -> None:
    sp = spec(image="casa/casa:6.6", steps=[
        {"name": "split", "command": ["mstransform"]},
        {"name": "image", "command": ["wsclean"], "image": "wsclean/wsclean:3.4"}])
    pod = render(sp)["spec"]["template"]["spec"]
    # Steps before the last run as init containers, in order.
    images = {c["name"]: c["image"] for c in [*pod.get("initContainers", []),
                                              *pod["containers"]]}
    assert images["split"] == "casa/casa:6.6" and images["image"] == "wsclean/wsclean:3.4"
