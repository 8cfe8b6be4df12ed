"""S3 misbehaving under the runner (versitygw behind a fault-injecting proxy), and a full
disk during stage-in: items end exactly once, outputs committed once with complete
manifests, or the item fails cleanly with a record that says why.

Pods are processes here, as in test_runner_s3.py (same helpers).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.faultproxy import FaultProxy, Faults
from tests.integration.test_runner_s3 import BUCKET, config, get_json, gw, keys, put, run_pod
from tests.s3server import VersityGW, s3server

__all__ = ["gw", "s3server"]  # fixtures, used by name below

COPY_ALL = ('cd "$NIGHTSHIFT_INPUTS" && for f in *; do cp "$f" "$NIGHTSHIFT_OUTPUTS/$f.out"; '
            'done')


def test_s3_errors_stalls_and_slow_bodies_through_stage_in_and_commit(
        gw: VersityGW, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stalled request is given up after 2 s (instead of 60) and retried.
    monkeypatch.setenv("NIGHTSHIFT_S3_READ_TIMEOUT", "2")
    inputs = {f"f{i}.dat": os.urandom(200_000 + i) for i in range(8)}
    for name, data in inputs.items():
        put(gw, f"proj/raw/n1/{name}", data, sha=True)
    faults = Faults(error_every=3, stall_every=7, slow_every=5, stall_seconds=4)
    with FaultProxy(gw.endpoint, faults) as proxy:
        cfg = config(gw, [{"storage": "data", "path": "raw/{item}/", "mode": "stage"}],
                     [{"storage": "data", "path": "out/{item}/", "mode": "batch"}])
        cfg["storages"]["data"]["endpoint"] = proxy.endpoint
        pod = run_pod(gw, tmp_path, cfg, [("copy", COPY_ALL)], ["n1"], cache=False)
    assert pod.rc == 0, pod
    print("injected:", faults.injected)  # the figures, for `pytest -s`
    # The faults happened: 5xx answers, stalls past the read timeout, slow bodies.
    assert faults.injected["error"] >= 3 and faults.injected["stall"] >= 1, faults.injected
    assert faults.injected["slow"] >= 1, faults.injected
    manifest = get_json(gw, "proj/out/n1/_SUCCESS")
    listed = [f["key"] for f in manifest["files"]]
    expect = {f"proj/out/n1/{n}.out" for n in inputs}
    assert sorted(listed) == sorted(expect)  # each output once, none missing
    assert keys(gw, "proj/out/") == expect | {"proj/out/n1/_SUCCESS"}
    for f in manifest["files"]:
        data = inputs[Path(f["key"]).name.removesuffix(".out")]
        assert f["size"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
    rec = get_json(gw, "proj/_nightshift/run1/reduce/0.json")
    assert rec["phase"] == "succeeded" and rec["attempt"] == 1
    assert gw.client().list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_disk_full_during_stage_in_fails_the_item_cleanly(gw: VersityGW, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as the pod's scratch needs root")
    put(gw, "proj/raw/n1/big.dat", os.urandom(3 * 2**20), sha=True)
    root = tmp_path / "pod"
    work = root / "work"
    work.mkdir(parents=True)
    # The pod's scratch (inputs and outputs) on a 1 MiB file system.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(work)], check=True)
    try:
        cfg = config(gw, [{"storage": "data", "path": "raw/{item}/", "mode": "stage"}],
                     [{"storage": "data", "path": "out/{item}/", "mode": "batch"}])
        pod = run_pod(gw, root, cfg, [("copy", COPY_ALL)], ["n1"], cache=False)
    finally:
        subprocess.run(["umount", "-l", str(work)], check=False)
    print("stage-in exit code:", pod.stage_in_rc)
    assert pod.stage_in_rc != 0 and pod.step_rcs == []  # no step ran
    rec = get_json(gw, "proj/_nightshift/run1/reduce/0.json")
    assert rec["phase"] == "stage-in-failed", rec
    assert "No space left on device" in rec["error"], rec
    # ... and what to set, naming where it filled.
    assert rec["error"].endswith(
        f"the item's scratch filled while staging the inputs into {work}/inputs: set "
        "spec.stages[].scratch.size to what one item's inputs and work need (the pod then "
        "asks for that much disk)"), rec["error"]
    assert pod.stage_in_rc == 75  # retried: with scratch.size, on a node with room
    assert keys(gw, "proj/out/") == set()  # nothing committed
