"""runner_parts: the runner's pod fragments, and runner_problems' messages."""

from __future__ import annotations

import json
from typing import Any

from nightshift.api import names
from nightshift.api.runnerwire import RunnerConfig
from nightshift.pipelinerun.runnerparts import runner_config, runner_parts, runner_problems
from nightshift.pipelinerun.spec import Archive, Stage, StorageRef

STORAGE = {
    "raw": StorageRef.model_validate({"name": "raw", "s3": {
        "bucket": "b", "prefix": "p/", "endpoint": "http://gw:7070", "credentialsSecret": "s3"}}),
    "nfs": StorageRef.model_validate({"name": "nfs", "pvc": {"claimName": "shared"}}),
}


def stage(**kw: Any) -> Stage:
    return Stage.model_validate({"name": "ifu", "image": "u", "steps": [
        {"name": "a", "command": ["x"]}], "forEach": {"items": ["n1"]}, **kw})


def test_no_runner_without_data() -> None:
    assert runner_parts(run="r", namespace="ns", stage=stage(), storage=STORAGE, archive=None,
                        runner_image="img") is None


def test_parts_shape() -> None:
    st = stage(inputs=[{"storage": "raw", "path": "in/{item}/"},
                       {"storage": "nfs", "path": "cal/", "mode": "stream"}],
               outputs=[{"storage": "raw", "path": "out/{item}/"}])
    parts = runner_parts(run="r", namespace="ns", stage=st, storage=STORAGE,
                         archive=Archive(storage="raw"), runner_image="img")
    # No opt-ins: no shared PID namespace, no node cache (tests/unit/test_pod_security.py).
    assert parts is not None and not parts.share_process_namespace
    stage_in, commit = parts.init_containers
    assert stage_in["command"] == ["nightshift-runner", "stage-in"]
    assert "restartPolicy" not in stage_in
    assert commit["command"] == ["nightshift-runner", "commit"]
    assert commit["restartPolicy"] == "Always"  # a native sidecar
    vols = {v["name"]: v for v in parts.volumes}
    assert vols["nightshift-work"] == {"name": "nightshift-work", "emptyDir": {}}
    assert "nightshift-cache" not in vols
    assert vols["nightshift-storage-nfs"]["persistentVolumeClaim"]["claimName"] == "shared"
    env = {e["name"]: e for e in stage_in["env"]}
    assert env["NIGHTSHIFT_S3_0_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "s3", "key": "AWS_ACCESS_KEY_ID"}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # The JSON the operator renders is what the runner parses.
    cfg = RunnerConfig.loads(env[names.ENV_RUNNER_CONFIG]["value"])
    assert cfg.storage("raw").access_key_env == "NIGHTSHIFT_S3_0_ACCESS_KEY_ID"
    assert cfg.storage("nfs").path == "/nightshift/storage/nfs"
    assert [i.mode for i in cfg.inputs] == ["stage", "stream"]
    mounts = {m["mountPath"]: m for m in parts.step_volume_mounts}
    assert mounts[names.MOUNT_BIN]["readOnly"] and names.MOUNT_WORK in mounts
    assert mounts["/nightshift/storage/nfs"]["readOnly"]
    assert {e["name"] for e in parts.step_env} == {
        names.ENV_SCRATCH, names.ENV_INPUTS, names.ENV_OUTPUTS}
    assert {m["mountPath"] for m in stage_in["volumeMounts"]} == {
        names.MOUNT_WORK, names.MOUNT_BIN, names.MOUNT_ITEMS, "/nightshift/storage/nfs"}


def test_scratch_is_an_empty_dir_sized_when_the_stage_says() -> None:
    """No hostPath: the kubelet's emptyDir is on the RAID0 array of a localDisk pool."""
    for scratch, expected in ((None, {}), ({"size": "200Gi"}, {"sizeLimit": "200Gi"})):
        st = stage(outputs=[{"storage": "raw", "path": "out/{item}/"}], scratch=scratch)
        parts = runner_parts(run="r", namespace="ns", stage=st, storage=STORAGE,
                             archive=None, runner_image="img")
        assert parts is not None
        work = next(v for v in parts.volumes if v["name"] == "nightshift-work")
        assert work == {"name": "nightshift-work", "emptyDir": expected}
        assert not [v for v in parts.volumes if "hostPath" in v]
        assert not [m for c in parts.init_containers for m in c["volumeMounts"]
                    if "subPathExpr" in m]


def test_problems_name_field_and_fix() -> None:
    st = stage(inputs=[{"storage": "raw", "path": "in/", "mode": "stream"},
                       {"storage": "gone", "path": "x"}],
               outputs=[{"storage": "raw", "path": "out/", "mode": "sometimes"}])
    problems = runner_problems(st, STORAGE, where="spec.stages[0]")
    assert any(p.startswith("spec.stages[0].inputs[0].mode: stream from S3") and
               "mode: stage" in p for p in problems)
    assert any(p.startswith("spec.stages[0].inputs[1].storage: no storage named 'gone'")
               for p in problems)
    assert any(p.startswith("spec.stages[0].outputs[0].mode:") for p in problems)
    assert any(p.startswith("spec.stages[0].outputs[0].path:") and "{item}" in p
               for p in problems)
    ok = stage(inputs=[{"storage": "raw", "path": "in/{item}/"}],
               outputs=[{"storage": "nfs", "path": "out/{item}/", "mode": "interleave"}])
    assert runner_problems(ok, STORAGE) == []


def test_rendered_config_json_is_the_wire_format() -> None:
    """The exact JSON a runner reads: a change here changes every stage's pod template."""
    st = stage(inputs=[{"storage": "raw", "path": "in/{item}/", "cache": False}],
               outputs=[{"storage": "nfs", "path": "out/{item}/", "localPath": "x"}])
    cfg, cred_env = runner_config(run="r", namespace="ns", stage=st, storage=STORAGE,
                                  archive=Archive(storage="nfs"))
    assert json.loads(cfg.dumps()) == {
        "version": 1, "run": "r", "namespace": "ns", "stage": "ifu", "cleanWork": False,
        "storages": {
            "raw": {"kind": "s3", "bucket": "b", "prefix": "p/", "endpoint": "http://gw:7070",
                    "region": None, "accessKeyEnv": "NIGHTSHIFT_S3_0_ACCESS_KEY_ID",
                    "secretKeyEnv": "NIGHTSHIFT_S3_0_SECRET_ACCESS_KEY"},
            "nfs": {"kind": "dir", "path": "/nightshift/storage/nfs"}},
        "inputs": [{"storage": "raw", "path": "in/{item}/", "mode": "stage", "cache": False,
                    "localPath": "", "failedPrefix": "failed/"}],
        "outputs": [{"storage": "nfs", "path": "out/{item}/", "mode": "batch", "cache": True,
                     "localPath": "x", "failedPrefix": "failed/"}],
        "archive": {"storage": "nfs", "prefix": "_nightshift"},
    }
    assert [e["name"] for e in cred_env] == ["NIGHTSHIFT_S3_0_ACCESS_KEY_ID",
                                             "NIGHTSHIFT_S3_0_SECRET_ACCESS_KEY"]
    # What the operator renders, the runner parses back to the same value.
    assert RunnerConfig.loads(cfg.dumps()) == cfg


def test_a_mounted_archive_is_mounted_read_write_in_stage_in_too() -> None:
    """Stage-in reads the item's previous record (its attempt number) from the archive and
    writes a stage-in failure's record there: without the mount every retry was attempt
    1, and its failed outputs went to the same attempt-1 prefix."""
    for inputs in ([], [{"storage": "nfs", "path": "cal/"}]):
        st = stage(inputs=inputs, outputs=[{"storage": "raw", "path": "out/{item}/"}])
        parts = runner_parts(run="r", namespace="ns", stage=st, storage=STORAGE,
                             archive=Archive(storage="nfs"), runner_image="img")
        assert parts is not None
        stage_in, commit = parts.init_containers
        for c in (stage_in, commit):
            mounts = [m for m in c["volumeMounts"]
                      if m["mountPath"] == f"{names.MOUNT_STORAGE}/nfs"]
            assert len(mounts) == 1 and not mounts[0].get("readOnly"), (c["name"], mounts)
    # An input on a mounted storage that is not the archive stays read-only.
    st = stage(inputs=[{"storage": "nfs", "path": "cal/"}])
    parts = runner_parts(run="r", namespace="ns", stage=st, storage=STORAGE,
                         archive=Archive(storage="raw"), runner_image="img")
    assert parts is not None
    (mount,) = [m for m in parts.init_containers[0]["volumeMounts"]
                if m["mountPath"] == f"{names.MOUNT_STORAGE}/nfs"]
    assert mount["readOnly"] is True
