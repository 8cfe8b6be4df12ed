"""The runner against a real S3-compatible server (versitygw), without Kubernetes.

A "pod" here is what the kubelet would run, as processes with the pod's environment:
a process group stands in for the pod (its leader for the pause container), temp dirs
for the /nightshift volumes (NIGHTSHIFT_ROOT), `nightshift-runner stage-in`, then the
commit sidecar beside the steps, each step through /nightshift/bin/step.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.s3server import VersityGW, s3server

__all__ = ["s3server"]  # the fixture, imported explicitly (no shared conftest edits)

RUNNER = Path(sys.executable).with_name("nightshift-runner")
BUCKET = "nightshift-test"


@dataclass
class Pod:
    stage_in_rc: int
    step_rcs: list[int]
    root: Path
    # Each step's output, stdout then stderr (the kubelet's log, whose last lines become
    # the termination message with FallbackToLogsOnError).
    step_out: list[str] = field(default_factory=list)
    stage_in_log: str = ""

    @property
    def rc(self) -> int:
        if self.stage_in_rc:
            return self.stage_in_rc
        return next((rc for rc in self.step_rcs if rc), 0)


def config(gw: VersityGW, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
           archive: bool = True) -> dict[str, Any]:
    return {
        "version": 1, "run": "run1", "namespace": "ns", "stage": "reduce",
        "storages": {"data": gw.storage_json("data", BUCKET, "proj/")},
        "inputs": inputs, "outputs": outputs,
        "archive": {"storage": "data", "prefix": "_nightshift"} if archive else None,
        "cacheMaxBytes": 2**30,
    }


def run_pod(gw: VersityGW, root: Path, cfg: dict[str, Any], steps: list[tuple[str, str]],
            items: list[str], index: int = 0, cache: bool = True,
            extra_env: dict[str, str] | None = None, stage_in_only: bool = False,
            sidecar_rc: int = 0) -> Pod:
    """Run one item's pod; steps are (name, sh -c script). `stage_in_only`: a pod lost
    after its stage-in (no step ran, the sidecar wrote nothing). `sidecar_rc`: -9 for a
    pod whose step kills its process group (the node lost)."""
    (root / "items").mkdir(parents=True, exist_ok=True)
    (root / "items" / "items").write_text("".join(i + "\n" for i in items))
    if cache:
        (root / "cache").mkdir(exist_ok=True)
    pause = subprocess.Popen(["sleep", "600"], process_group=0)
    env = {**os.environ, **gw.credentials_env("data"), "NIGHTSHIFT_ROOT": str(root),
           "NIGHTSHIFT_RUNNER_CONFIG": json.dumps(cfg), "JOB_COMPLETION_INDEX": str(index),
           "NIGHTSHIFT_PROC_PGID": str(pause.pid), "NIGHTSHIFT_IMDS_ENDPOINT": "",
           "NIGHTSHIFT_POD_NAME": f"pod-{index}", "NODE_NAME": "node-a",
           "NIGHTSHIFT_LAST_STEP": steps[-1][0],
           "NIGHTSHIFT_INPUTS": str(root / "work" / "inputs"),
           "NIGHTSHIFT_OUTPUTS": str(root / "work" / "outputs"), **(extra_env or {})}
    try:
        stage_in = subprocess.run([str(RUNNER), "stage-in"], env=env, process_group=pause.pid,
                                  timeout=300, check=False, capture_output=True, text=True)
        print(stage_in.stderr, end="")  # the init container's log, for `pytest -s`
        if stage_in.returncode or stage_in_only:
            return Pod(stage_in.returncode, [], root, stage_in_log=stage_in.stderr)
        sidecar = subprocess.Popen([str(RUNNER), "commit"], env=env, process_group=pause.pid)
        rcs, outs = [], []
        try:
            for name, script in steps:
                done = subprocess.run(
                    ["/bin/sh", str(root / "bin" / "step"), name, "--", "/bin/sh", "-c", script],
                    env=env, process_group=pause.pid, timeout=300, check=False,
                    capture_output=True, text=True)
                rcs.append(done.returncode)
                outs.append(done.stdout + done.stderr)
                if rcs[-1]:
                    break
        finally:
            sidecar.terminate()  # the kubelet stops native sidecars after the steps
            assert sidecar.wait(30) == sidecar_rc
        return Pod(0, rcs, root, outs, stage_in.stderr)
    finally:
        pause.kill()
        pause.wait()


def put(gw: VersityGW, key: str, data: bytes, sha: bool = False) -> None:
    meta = {"sha256": hashlib.sha256(data).hexdigest()} if sha else {}
    gw.client().put_object(Bucket=BUCKET, Key=key, Body=data, Metadata=meta)


def get_json(gw: VersityGW, key: str) -> dict[str, Any]:
    body = gw.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return json.loads(body)  # type: ignore[no-any-return]


def keys(gw: VersityGW, prefix: str) -> set[str]:
    pages = gw.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"] for p in pages for o in p.get("Contents", [])}


@pytest.fixture
def gw(s3server: VersityGW) -> VersityGW:
    s3server.client().create_bucket(Bucket=BUCKET)
    return s3server


def test_stage_run_commit_record_then_cache_hit(gw: VersityGW, tmp_path: Path) -> None:
    big = os.urandom(40 * 2**20 + 123)  # above the ranged-GET threshold
    put(gw, "proj/raw/night-7/small.txt", b"hello night 7\n")
    put(gw, "proj/raw/night-7/sub/big.bin", big, sha=True)
    cfg = config(gw, [{"storage": "data", "path": "raw/{item}/", "mode": "stage"}],
                 [{"storage": "data", "path": "out/{item}/", "mode": "batch"}])
    steps = [
        ("copy", 'cp "$NIGHTSHIFT_INPUTS/small.txt" "$NIGHTSHIFT_OUTPUTS/copy.txt"'),
        ("big", ('cat "$NIGHTSHIFT_INPUTS/sub/big.bin" "$NIGHTSHIFT_INPUTS/sub/big.bin" '
                 '> "$NIGHTSHIFT_OUTPUTS/double.bin" && sleep 2')),
    ]
    pod = run_pod(gw, tmp_path / "pod1", cfg, steps, ["night-6", "night-7"], index=1)
    assert pod.rc == 0
    manifest = get_json(gw, "proj/out/night-7/_SUCCESS")
    files = {f["key"]: f for f in manifest["files"]}
    assert set(files) == {"proj/out/night-7/copy.txt", "proj/out/night-7/double.bin"}
    assert files["proj/out/night-7/double.bin"]["size"] == 2 * len(big)
    assert files["proj/out/night-7/double.bin"]["sha256"] == hashlib.sha256(big * 2).hexdigest()
    body = gw.client().get_object(Bucket=BUCKET, Key="proj/out/night-7/copy.txt")["Body"].read()
    assert body == b"hello night 7\n"
    rec = get_json(gw, "proj/_nightshift/run1/reduce/1.json")
    assert rec["item"] == "night-7" and rec["index"] == 1 and rec["attempt"] == 1
    assert rec["exitCode"] == 0 and rec["phase"] == "succeeded" and rec["node"] == "node-a"
    assert rec["bytesIn"] == len(big) + 14 and rec["bytesOut"] == 2 * len(big) + 14
    assert rec["cacheMisses"] == 2 and rec["cacheHits"] == 0
    assert rec["verified"] == {"sha256": 1, "md5": 1, "size": 0}
    assert [s["name"] for s in rec["steps"]] == ["copy", "big"]
    assert rec["samples"] >= 1 and rec["processes"] >= 1 and rec["peakRssBytes"] > 0
    # Same node (same cache dir), next attempt: both inputs come from the node cache.
    pod2_root = tmp_path / "pod2"
    pod2_root.mkdir()
    (pod2_root / "cache").symlink_to(tmp_path / "pod1" / "cache")
    pod = run_pod(gw, pod2_root, cfg, steps, ["night-6", "night-7"], index=1)
    assert pod.rc == 0
    rec = get_json(gw, "proj/_nightshift/run1/reduce/1.json")
    assert rec["attempt"] == 2 and rec["cacheHits"] == 2 and rec["cacheMisses"] == 0
    assert [a["attempt"] for a in rec["previousAttempts"]] == [1]


def test_failed_step_outputs_go_to_failed_prefix(gw: VersityGW, tmp_path: Path) -> None:
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/", "mode": "interleave"}])
    steps = [("make", 'echo partial > "$NIGHTSHIFT_OUTPUTS/part.txt"'),
             ("crash", "exit 3"), ("never", "exit 0")]
    pod = run_pod(gw, tmp_path, cfg, steps, ["a"], cache=False)
    assert pod.step_rcs == [0, 3]  # the user's exit code, for podFailurePolicy
    assert keys(gw, "proj/out/") == set()
    assert keys(gw, "proj/failed/") == {"proj/failed/out/a/attempt-1/part.txt"}
    rec = get_json(gw, "proj/_nightshift/run1/reduce/0.json")
    assert rec["exitCode"] == 3 and rec["failedStep"] == "crash" and rec["phase"] == "failed"


def test_interleave_uploads_while_steps_run(gw: VersityGW, tmp_path: Path) -> None:
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/", "mode": "interleave"}])
    committed = gw.object_path(BUCKET, "proj/out/x/first.txt")
    # The step waits (at most 60 s) until its first file is in the store, then goes on:
    # it can only pass if the sidecar uploaded it while the step was still running.
    script = (f'echo 1 > "$NIGHTSHIFT_OUTPUTS/first.txt"; i=0; '
              f'while [ ! -f "{committed}" ] && [ $i -lt 60 ]; do sleep 1; i=$((i+1)); done; '
              f'[ -f "{committed}" ] || exit 9; echo 2 > "$NIGHTSHIFT_OUTPUTS/second.txt"')
    pod = run_pod(gw, tmp_path, cfg, [("only", script)], ["x"], cache=False)
    assert pod.rc == 0
    manifest = get_json(gw, "proj/out/x/_SUCCESS")
    assert [f["key"] for f in manifest["files"]] == ["proj/out/x/first.txt",
                                                      "proj/out/x/second.txt"]


def test_a_pod_lost_after_interleaving_leaves_its_prefix_withdrawn_and_the_retry_cleans_it(
        gw: VersityGW, tmp_path: Path) -> None:
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/", "mode": "interleave"}],
                 archive=False)
    committed = gw.object_path(BUCKET, "proj/out/x/first.txt")
    # Once the sidecar has uploaded first.txt, the node is lost: every process of the pod
    # is SIGKILLed at once, the sidecar with no chance to clean up.
    script = (f'echo 1 > "$NIGHTSHIFT_OUTPUTS/first.txt"; i=0; '
              f'while [ ! -f "{committed}" ] && [ $i -lt 60 ]; do sleep 1; i=$((i+1)); done; '
              f'[ -f "{committed}" ] || exit 9; kill -KILL 0')
    lost = run_pod(gw, tmp_path / "a1", cfg, [("only", script)], ["x"], cache=False,
                   sidecar_rc=-9)
    assert lost.step_rcs == [-9]
    assert keys(gw, "proj/out/x/") == {"proj/out/x/first.txt", "proj/out/x/_SUCCESS.withdrawn"}
    assert get_json(gw, "proj/out/x/_SUCCESS.withdrawn") == {"keys": ["proj/out/x/first.txt"]}
    # A consumer of the parent prefix: the lost attempt's file is not data (until session
    # 48 it was staged, unmarked).
    parent = config(gw, [{"storage": "data", "path": "out/", "cache": False}], [],
                    archive=False)
    assert run_pod(gw, tmp_path / "down", parent, [("only", "exit 0")], ["n"],
                   cache=False, stage_in_only=True).stage_in_rc == 66
    retry = run_pod(gw, tmp_path / "a2", cfg,
                    [("only", 'echo 2 > "$NIGHTSHIFT_OUTPUTS/second.txt"')], ["x"], cache=False)
    assert retry.rc == 0
    assert keys(gw, "proj/out/x/") == {"proj/out/x/_SUCCESS", "proj/out/x/second.txt"}


def test_a_required_output_left_empty_fails_the_item(gw: VersityGW, tmp_path: Path) -> None:
    """outputs[].required: steps that succeed but write nothing to it fail the item
    (exit 75, its retries apply) with a last line naming the output and where the step
    should have written; what was interleaved into the other output comes back out. The
    next attempt writes it and commits both."""
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/", "mode": "interleave",
                           "localPath": "logs"},
                          {"storage": "data", "path": "cat/{item}/", "localPath": "catalog",
                           "required": True}])
    log = ('mkdir -p "$NIGHTSHIFT_OUTPUTS/logs" "$NIGHTSHIFT_OUTPUTS/catalog" && '
           'echo ran > "$NIGHTSHIFT_OUTPUTS/logs/run.log" && sleep 4')
    pod = run_pod(gw, tmp_path / "a1", cfg, [("detect", log)], ["n7"], cache=False)
    assert pod.step_rcs == [75]
    last = pod.step_out[0].strip().splitlines()[-1]
    assert last == ("nightshift: committing outputs failed: stage reduce outputs[1] is "
                    "required, but the steps wrote no file under $NIGHTSHIFT_OUTPUTS/catalog "
                    "(to commit to data: proj/cat/n7/); check where the step writes, or drop "
                    "required if some items have no outputs"), last
    assert not keys(gw, "proj/out/") and not keys(gw, "proj/cat/"), "nothing committed"
    assert keys(gw, "proj/failed/") == {"proj/failed/out/n7/attempt-1/run.log"}
    rec = get_json(gw, "proj/_nightshift/run1/reduce/0.json")
    assert rec["phase"] == "failed" and rec["exitCode"] == 75, rec
    pod = run_pod(gw, tmp_path / "a2", cfg, [("detect", log + (
        ' && echo "1 source" > "$NIGHTSHIFT_OUTPUTS/catalog/sources.txt"'))], ["n7"],
        cache=False)
    assert pod.step_rcs == [0]
    assert [f["key"] for f in get_json(gw, "proj/cat/n7/_SUCCESS")["files"]] == [
        "proj/cat/n7/sources.txt"]
    assert keys(gw, "proj/out/") == {"proj/out/n7/run.log", "proj/out/n7/_SUCCESS"}


def test_commit_failure_exits_75(gw: VersityGW, tmp_path: Path) -> None:
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/"}], archive=False)
    cfg["storages"]["data"]["bucket"] = "no-such-bucket"
    pod = run_pod(gw, tmp_path, cfg, [("only", 'echo x > "$NIGHTSHIFT_OUTPUTS/x"')], ["x"],
                  cache=False)
    assert pod.step_rcs == [75]


def test_a_refused_identity_is_named_in_the_steps_last_words(gw: VersityGW,
                                                            tmp_path: Path) -> None:
    """A secret key the server refuses: the step exits 75 and its last line (the pod's
    termination message, so the run's failure sample) gives the server's refusal and
    the Secret to check (not the permissions: the keys themselves are wrong)."""
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/"}], archive=False)
    real = gw.secret_key
    try:
        gw.secret_key = "not-" + real
        pod = run_pod(gw, tmp_path, cfg, [("only", 'echo x > "$NIGHTSHIFT_OUTPUTS/x"')],
                      ["x"], cache=False)
    finally:
        gw.secret_key = real
    assert pod.step_rcs == [75]
    last = pod.step_out[0].strip().splitlines()[-1]
    assert "storage unreachable: ClientError: An error occurred (" in last, pod.step_out
    assert "(SignatureDoesNotMatch)" in last, last
    assert last.endswith("the store does not accept the pod's S3 keys: check "
                         "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the storage's "
                         "credentialsSecret (spec.storage[].s3) and its endpoint and region"
                         ), last
    assert not keys(gw, "proj/out/"), "nothing committed"
    print(last)  # what a user sees, for `pytest -s`


def test_an_input_whose_keys_are_refused_names_the_input_and_the_secret(
        gw: VersityGW, tmp_path: Path) -> None:
    # The inputs' storage has wrong keys; the archive (the task record) has good ones.
    put(gw, "proj/raw/x/f.txt", b"x\n")
    cfg = config(gw, [{"storage": "raw", "path": "raw/{item}/"}], [])
    cfg["storages"]["raw"] = gw.storage_json("raw", BUCKET, "proj/")
    bad = {k: ("not-" + v if k.endswith("_SK") else v)
           for k, v in gw.credentials_env("raw").items()}
    pod = run_pod(gw, tmp_path, cfg, [("only", "exit 0")], ["x"], extra_env=bad)
    assert pod.stage_in_rc == 1  # not retried as a moment's fault
    error = get_json(gw, "proj/_nightshift/run1/reduce/0.json")["error"]
    assert error.startswith(f"inputs[0] (raw: s3://{BUCKET}/proj/raw/x/): ClientError: "
                            "An error occurred (SignatureDoesNotMatch)"), error
    assert error.endswith("the store does not accept the pod's S3 keys: check "
                          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the storage's "
                          "credentialsSecret (spec.storage[].s3) and its endpoint and "
                          "region"), error


def test_an_input_that_matches_nothing_fails_stage_in_naming_it(gw: VersityGW,
                                                                tmp_path: Path) -> None:
    # A typo in the path, or a night that is not there: the steps would run on nothing.
    put(gw, "proj/raw/night-1/f.txt", b"night 1\n")
    cfg = config(gw, [{"storage": "data", "path": "raw/night-1/"},
                      {"storage": "data", "path": "raws/{item}/"}],
                 [{"storage": "data", "path": "out/{item}/"}])
    pod = run_pod(gw, tmp_path / "typo", cfg, [("only", "exit 0")], ["night-1"])
    assert pod.stage_in_rc == 66
    rec = get_json(gw, "proj/_nightshift/run1/reduce/0.json")
    assert rec["phase"] == "stage-in-failed", rec
    assert rec["error"] == (
        "missing input: inputs[1].path 'raws/{item}/' matched no file in storage 'data' "
        f"(s3://{BUCKET}/proj/raws/night-1/): check the path and that the data is there, "
        "or set inputs[1].optional: true when an item may have no input"), rec["error"]
    assert keys(gw, "proj/out/") == set()
    # Optional: nothing staged for it, and the steps run.
    cfg["inputs"][1]["optional"] = True
    pod = run_pod(gw, tmp_path / "optional", cfg,
                  [("only", 'ls "$NIGHTSHIFT_INPUTS" > "$NIGHTSHIFT_OUTPUTS/seen.txt"')],
                  ["night-1"])
    assert pod.rc == 0
    seen = gw.client().get_object(Bucket=BUCKET, Key="proj/out/night-1/seen.txt")
    assert seen["Body"].read() == b"f.txt\n"


@pytest.mark.parametrize("with_sha", [True, False], ids=["sha256-metadata", "md5-etag"])
def test_corrupted_object_fails_stage_in(gw: VersityGW, tmp_path: Path, with_sha: bool) -> None:
    data = os.urandom(1000)
    put(gw, "proj/raw/x/f.bin", data, sha=with_sha)
    # Damage the stored bytes behind the server's back (same size: only a checksum sees it).
    path = gw.object_path(BUCKET, "proj/raw/x/f.bin")
    path.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    cfg = config(gw, [{"storage": "data", "path": "raw/{item}/"}],
                 [{"storage": "data", "path": "out/{item}/"}])
    pod = run_pod(gw, tmp_path, cfg, [("only", "exit 0")], ["x"])
    assert pod.stage_in_rc == 65
    rec = get_json(gw, "proj/_nightshift/run1/reduce/0.json")
    assert rec["phase"] == "stage-in-failed" and "checksum" in rec["error"]
    # Nothing bad was cached (the config's namespace "ns" is the cache partition).
    assert not list((tmp_path / "cache" / "namespaces" / "ns" / "objects").iterdir())
    assert keys(gw, "proj/out/") == set()


def test_server_killed_mid_upload_retry_succeeds(gw: VersityGW, tmp_path: Path) -> None:
    cfg = config(gw, [], [{"storage": "data", "path": "out/{item}/"}])
    size = 160 * 2**20  # 10 multipart parts
    script = (f'head -c {size} /dev/urandom > "$NIGHTSHIFT_OUTPUTS/big.bin"; '
              'echo small > "$NIGHTSHIFT_OUTPUTS/small.txt"')
    events: list[str] = []
    bad: list[str] = []
    stop = threading.Event()
    sgwtmp = gw.data_dir / BUCKET / ".sgwtmp"

    def chaos() -> None:
        # Kill the server as soon as a multipart upload is under way, restart it 2 s on.
        while not stop.is_set():
            if sgwtmp.exists() and any(sgwtmp.rglob("*")):
                gw.kill()
                events.append("killed")
                time.sleep(2)
                gw.start()
                events.append("restarted")
                return
            time.sleep(0.01)

    def watch() -> None:
        # A consumer's view: whenever _SUCCESS is visible, every key it lists must be.
        while not stop.is_set():
            try:
                manifest = get_json(gw, "proj/out/x/_SUCCESS")
            except (ClientError, BotoCoreError):  # not there yet, or the server is down
                time.sleep(0.05)
                continue
            present = keys(gw, "proj/out/x/")
            bad.extend(f["key"] for f in manifest["files"] if f["key"] not in present)
            events.append("manifest")
            return

    threads = [threading.Thread(target=chaos), threading.Thread(target=watch)]
    for t in threads:
        t.start()
    try:
        pod = run_pod(gw, tmp_path, cfg, [("only", script)], ["x"], cache=False)
    finally:
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
    assert events[:3] == ["killed", "restarted", "manifest"], events
    assert pod.rc == 0 and not bad
    manifest = get_json(gw, "proj/out/x/_SUCCESS")
    sizes = {f["key"]: f["size"] for f in manifest["files"]}
    assert sizes == {"proj/out/x/big.bin": size, "proj/out/x/small.txt": 6}
    head = gw.client().head_object(Bucket=BUCKET, Key="proj/out/x/big.bin")
    assert head["ContentLength"] == size
    assert gw.client().list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
