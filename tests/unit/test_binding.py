"""PipelineRuns naming SharedStorages: each type becomes the storage block or pod volume
the runner and Job renderer know, stages see software mounts, what a type cannot do
is a problem naming the field, and a SharedStorage that does not exist makes the
stages that need it wait (never Invalid: it may be created after the run)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

from nightshift.api import names
from nightshift.pipelinerun import binding
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift.pipelinerun.validate import validate_spec
from tests.bad_pipelineruns import stage
from tests.bad_sharedstorages import GOOD
from tests.unit.test_plan import condition, items_for, jobs_of, make_run, observe

SHARED = {"raw-s3": GOOD["s3"], "raw": GOOD["nfs-dedicated"], "montage": GOOD["gluster-nufa"],
          "software": GOOD["cvmfs-local"]}


def run_with(stages: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    storage = [{"name": "raw", "sharedStorage": "raw-s3"},
               {"name": "nfs", "sharedStorage": "raw"},
               {"name": "scratch", "sharedStorage": "montage"},
               {"name": "sw", "sharedStorage": "software"}]
    return make_run(stages, storage=storage, **spec)


def calib(**kw: Any) -> dict[str, Any]:
    return stage("calib", forEach={"range": {"from": 0, "to": 9}}, **kw)


def job_for(run: dict[str, Any], shared: dict[str, Any] | None = None) -> dict[str, Any]:
    obs = replace(observe(run, items=items_for(run, "calib", count=10)),
                  shared_storages=SHARED if shared is None else shared)
    p = plan(obs)
    assert not [c for c in p.status["conditions"]
                if c["type"] == "Invalid" and c["status"] == "True"], p.status["conditions"]
    (job,) = jobs_of(p)
    return job


def pod(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def runner_config(job: dict[str, Any]) -> dict[str, Any]:
    stage_in = next(c for c in pod(job)["initContainers"] if c["name"] == "nightshift-stage-in")
    env = next(e for e in stage_in["env"] if e["name"] == names.ENV_RUNNER_CONFIG)
    cfg: dict[str, Any] = json.loads(env["value"])
    return cfg


def test_s3_becomes_the_inline_s3_block_and_cache_size() -> None:
    job = job_for(run_with([calib(inputs=[{"storage": "raw", "path": "n/{item}"}])]))
    inline = make_run([calib(inputs=[{"storage": "raw", "path": "n/{item}"}])],
                      storage=[{"name": "raw", "s3": GOOD["s3"]["spec"]["s3"] | {}}])
    inline["spec"]["storage"][0]["s3"].pop("cache")
    plain = job_for(inline, shared={})
    cfg, plain_cfg = runner_config(job), runner_config(plain)
    assert cfg["storages"] == plain_cfg["storages"]
    assert cfg["cacheMaxBytes"] == 200 * 2**30, "the SharedStorage's cache.size"
    assert "cacheMaxBytes" not in plain_cfg
    # Same credentials env from the same Secret.
    def creds(j: dict[str, Any]) -> list[dict[str, Any]]:
        return [e for e in pod(j)["initContainers"][0]["env"]
                if e["name"].startswith("NIGHTSHIFT_S3_")]
    assert creds(job) == creds(plain) and len(creds(job)) == 2


def test_nfs_is_its_clients_claim() -> None:
    job = job_for(run_with([calib(outputs=[{"storage": "nfs", "path": "out/{item}/"}])]))
    vols = {v["name"]: v for v in pod(job)["volumes"]}
    assert vols["nightshift-storage-nfs"]["persistentVolumeClaim"] == {
        "claimName": "raw-nfs-client"}


def test_gluster_is_the_nodes_mount_through_its_claim_host_to_container() -> None:
    job = job_for(run_with([calib(inputs=[{"storage": "scratch", "path": "in/{item}"}],
                                  outputs=[{"storage": "scratch", "path": "out/{item}/"}])]))
    vols = {v["name"]: v for v in pod(job)["volumes"]}
    # Its clients' claim (a PV of the node's FUSE mount), never a hostPath: pipeline pods
    # stay within the restricted Pod Security Standard.
    assert vols["nightshift-storage-scratch"] == {
        "name": "nightshift-storage-scratch",
        "persistentVolumeClaim": {"claimName": "montage-gluster-client"}}
    assert not [v for v in pod(job)["volumes"] if "hostPath" in v]
    runner_mounts = [m for c in pod(job)["initContainers"] if c["name"].startswith("nightshift-")
                     for m in c["volumeMounts"] if m["name"] == "nightshift-storage-scratch"]
    assert len(runner_mounts) == 2  # stage-in reads, commit writes
    assert {m["mountPropagation"] for m in runner_mounts} == {"HostToContainer"}
    assert runner_config(job)["storages"]["scratch"]["kind"] == "dir"
    # ... checked to be the node's FUSE mount before the runner uses it (runner/mounts.py).
    assert runner_config(job)["storages"]["scratch"]["fuse"] is True


def test_cvmfs_inputs_through_the_runner_are_checked_repository_by_repository() -> None:
    job = job_for(run_with([calib(inputs=[{"storage": "sw",
                                           "path": "demo.nightshift.io/calib/{item}"}])]))
    assert runner_config(job)["storages"]["sw"] == {
        "kind": "dir", "path": "/nightshift/storage/sw", "fuseDirs": ["demo.nightshift.io"]}


def test_cvmfs_software_mount_at_cvmfs_through_its_claim() -> None:
    job = job_for(run_with([calib(mounts=[{"storage": "sw"}])]))
    (step,) = pod(job)["containers"]
    (m,) = [m for m in step["volumeMounts"] if m["name"] == "nightshift-mount-sw"]
    assert m == {"name": "nightshift-mount-sw", "mountPath": "/cvmfs", "readOnly": True,
                 "mountPropagation": "HostToContainer"}
    (v,) = [v for v in pod(job)["volumes"] if v["name"] == "nightshift-mount-sw"]
    assert v["persistentVolumeClaim"] == {"claimName": "software-cvmfs-client"}
    # Only the steps see it; the runner's containers do not need it.
    assert not [m for c in pod(job).get("initContainers", []) for m in c["volumeMounts"]
                if m["name"] == "nightshift-mount-sw"]


def test_a_pvc_and_a_gluster_volume_as_writable_mounts() -> None:
    run = run_with([calib(mounts=[{"storage": "scratch", "mountPath": "/scratch",
                                   "readOnly": False},
                                  {"storage": "claim", "mountPath": "/data"}])])
    run["spec"]["storage"].append({"name": "claim", "pvc": {"claimName": "c",
                                                           "subPath": "x"}})
    (step,) = pod(job_for(run))["containers"]
    mounts = {m["mountPath"]: m for m in step["volumeMounts"]}
    assert mounts["/scratch"]["readOnly"] is False
    assert mounts["/scratch"]["mountPropagation"] == "HostToContainer"
    assert mounts["/data"] == {"name": "nightshift-mount-claim", "mountPath": "/data",
                               "readOnly": True, "subPath": "x"}


def problems(run: dict[str, Any]) -> list[str]:
    spec = PipelineRunSpec.model_validate(run["spec"])
    b = binding.bind(spec, SHARED, "physics")
    return [str(p) for p in [*validate_spec(b.spec, "nightly"), *b.problems]]


def test_what_a_type_cannot_do_names_the_field() -> None:
    assert problems(run_with([calib(outputs=[{"storage": "sw", "path": "o/{item}/"}])])) == [
        "spec.stages[0].outputs[0].storage: 'sw' is the cvmfs SharedStorage 'software', "
        "read-only: write outputs to another storage"]
    assert problems(run_with([calib(mounts=[{"storage": "raw"}])])) == [
        "spec.stages[0].mounts[0].storage: 'raw' is S3, which pods do not mount: use it in "
        "inputs or outputs (through the runner)"]
    assert problems(run_with([calib(mounts=[{"storage": "scratch"}])])) == [
        "spec.stages[0].mounts[0].mountPath: is required (only a cvmfs SharedStorage has a "
        "default, /cvmfs): e.g. /data"]
    assert problems(run_with([calib(mounts=[{"storage": "sw", "readOnly": False}])])) == [
        "spec.stages[0].mounts[0].readOnly: a cvmfs SharedStorage is read-only: remove "
        "readOnly: false"]
    archived = run_with([calib()], archive={"storage": "sw"})
    assert "spec.archive.storage: the cvmfs SharedStorage 'software' is read-only" in \
        "; ".join(problems(archived))


def test_an_nfs_storage_exported_read_only_takes_no_outputs_nor_writable_mounts() -> None:
    ro = copy.deepcopy(GOOD["nfs-dedicated"])
    ro["spec"]["nfs"]["exportOptions"] = {"accessType": "RO"}
    run = run_with([calib(outputs=[{"storage": "nfs", "path": "o/{item}/"}],
                          mounts=[{"storage": "nfs", "mountPath": "/data", "readOnly": False}])])
    spec = PipelineRunSpec.model_validate(run["spec"])
    b = binding.bind(spec, {**SHARED, "raw": ro}, "physics")
    assert [str(p) for p in [*validate_spec(b.spec, "nightly"), *b.problems]] == [
        "spec.stages[0].outputs[0].storage: 'nfs' is the nfs SharedStorage 'raw', read-only "
        "(its spec.nfs.exportOptions.accessType is RO; RW lets pods write): write outputs to "
        "another storage",
        "spec.stages[0].mounts[0].readOnly: an nfs SharedStorage is read-only (its "
        "spec.nfs.exportOptions.accessType is RO; RW lets pods write): remove readOnly: false"]
    # Exported read-write (the default), the same stage is fine.
    assert problems(run) == []


def test_storage_entries_need_exactly_one_source() -> None:
    run = run_with([calib()])
    assert problems(run) == []
    run["spec"]["storage"][0]["s3"] = {"bucket": "raw-data"}
    assert problems(run) == ["spec.storage[0]: set exactly one of s3, pvc or sharedStorage"]


def test_a_missing_shared_storage_makes_its_stages_wait() -> None:
    run = run_with([calib(inputs=[{"storage": "raw", "path": "n/{item}"}]),
                    stage("other", forEach={"items": ["x"]})])
    shared = {k: v for k, v in SHARED.items() if k != "raw-s3"}
    obs = replace(observe(run, items=items_for(run, "calib", "other", count=10)),
                  shared_storages={**shared, "raw-s3": None})
    p = plan(obs)
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["other"]
    prog = condition(p, "Progressing")
    assert prog["reason"] == "WaitingForStorage"
    assert prog["message"].startswith("spec.storage[0].sharedStorage: no SharedStorage "
                                      "'raw-s3' in namespace physics")
    assert condition(p, "Invalid")["status"] == "False"
    assert p.requeue_after == 30.0
    # Created later: the stage starts.
    later = copy.deepcopy(run)
    later["status"] = p.status
    obs2 = replace(observe(later, jobs=[], items=items_for(run, "calib", "other", count=10)),
                   shared_storages=SHARED)
    assert "calib" in [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(plan(obs2))]


def test_a_stage_on_a_pool_its_storage_does_not_mount_on_waits_and_says_so() -> None:
    run = run_with([calib(pool="gpu", mounts=[{"storage": "sw"}]),
                    stage("other", forEach={"items": ["x"]}, pool="gpu")])
    obs = replace(observe(run, items=items_for(run, "calib", "other", count=10)),
                  shared_storages=SHARED)
    p = plan(obs)
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["other"]
    prog = condition(p, "Progressing")
    assert (prog["status"], prog["reason"]) == ("True", "WaitingForStorage")
    assert prog["message"] == (
        "spec.stages[0].pool: pool 'gpu' is not in SharedStorage 'software' "
        "spec.cvmfs.client.pools (workers), so its nodes do not mount 'sw': add the pool "
        "there, or run the stage on one of those; the stage waits until then")
    assert condition(p, "Invalid")["status"] == "False"
    # The storage's clients go to that pool too: the stage starts.
    wider = copy.deepcopy(SHARED["software"])
    wider["spec"]["cvmfs"]["client"]["pools"] = ["workers", "gpu"]
    later = copy.deepcopy(run)
    later["status"] = p.status
    obs2 = replace(observe(later, jobs=[], items=items_for(run, "calib", "other", count=10)),
                   shared_storages={**SHARED, "software": wider})
    assert "calib" in [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(plan(obs2))]
    # A stage on the storage's own pool, or one that does not use it, is never held.
    ok = run_with([calib(pool="workers", mounts=[{"storage": "sw"}])])
    assert binding.off_pool(binding.bind(PipelineRunSpec.model_validate(ok["spec"]), SHARED,
                                         "physics").spec) == {}


def test_only_waiting_before_anything_runs_is_pending() -> None:
    run = run_with([calib(inputs=[{"storage": "raw", "path": "n/{item}"}])])
    p = plan(replace(observe(run, items=items_for(run, "calib", count=10)),
                     shared_storages={"raw-s3": None}))
    assert p.status["phase"] == "Pending" and jobs_of(p) == []
    assert condition(p, "Progressing")["status"] == "False"


def test_referenced_names() -> None:
    spec = PipelineRunSpec.model_validate(run_with([calib()])["spec"])
    assert binding.referenced(spec) == ["montage", "raw", "raw-s3", "software"]


def test_an_invalid_shared_storage_makes_its_stages_wait_saying_why() -> None:
    run = run_with([calib(inputs=[{"storage": "raw", "path": "n/{item}"}]),
                    stage("other", forEach={"items": ["x"]})])
    bad = copy.deepcopy(SHARED["raw-s3"])
    bad["status"] = {"conditions": [
        {"type": "Ready", "status": "False", "reason": "Invalid", "message": "see Invalid"},
        {"type": "Invalid", "status": "True", "reason": "InvalidSpec",
         "message": "spec.s3.endpoint: 'gw:7070' is not an http(s) URL"}]}
    obs = replace(observe(run, items=items_for(run, "calib", "other", count=10)),
                  shared_storages={**SHARED, "raw-s3": bad})
    p = plan(obs)
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["other"]
    prog = condition(p, "Progressing")
    assert prog["reason"] == "WaitingForStorage"
    assert prog["message"].startswith(
        "spec.storage[0].sharedStorage: SharedStorage 'raw-s3' is Invalid (spec.s3.endpoint: "
        "'gw:7070' is not an http(s) URL); the stages that use it start once it is fixed")
    assert condition(p, "Invalid")["status"] == "False"
    # Fixed: the stage starts.
    later = copy.deepcopy(run)
    later["status"] = p.status
    obs2 = replace(observe(later, jobs=[], items=items_for(run, "calib", "other", count=10)),
                   shared_storages=SHARED)
    assert "calib" in [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(plan(obs2))]


def test_a_shared_storage_invalid_after_it_applied_holds_nothing() -> None:
    run = run_with([calib(inputs=[{"storage": "raw", "path": "n/{item}"}])])
    was_good = copy.deepcopy(SHARED["raw-s3"])
    was_good["status"] = {"appliedGeneration": 1, "conditions": [
        {"type": "Invalid", "status": "True", "reason": "InvalidSpec", "message": "..."}]}
    p = plan(replace(observe(run, items=items_for(run, "calib", count=10)),
                     shared_storages={**SHARED, "raw-s3": was_good}))
    assert [j["metadata"]["labels"][names.LABEL_STAGE] for j in jobs_of(p)] == ["calib"]
