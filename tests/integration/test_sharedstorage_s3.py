"""An s3 SharedStorage used by a PipelineRun against versitygw, on the local cluster:
items listed through it, the stage's runner config its S3 block and cache size; a run
created before its storage waits for it; the storage is kept while a run that names it
has not ended, and goes when it ends (cancelled)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import KWOK_FAST, pipelinerun, wait_phase, wait_progressing
from tests.integration.test_sharedstorage import (
    condition,
    get,
    gone,
    kwok_pool,
    ns,
    storage,
    storage_operator,
    wait_ready,
)
from tests.s3server import VersityGW, s3server

__all__ = ["kwok_pool", "ns", "s3server", "storage_operator"]  # fixtures, used by name


def _secret(ns: str, gw: VersityGW) -> dict[str, Any]:
    def b64(s: str) -> str:
        return base64.b64encode(s.encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys",
                                                                "namespace": ns},
            "data": {"AWS_ACCESS_KEY_ID": b64(gw.access_key),
                     "AWS_SECRET_ACCESS_KEY": b64(gw.secret_key)}}


def test_s3_storage_used_by_runs_against_versitygw(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str, s3server: VersityGW, tmp_path: Path) -> None:
    gw = s3server
    gw.client().create_bucket(Bucket="snfactory")
    for n in range(1, 4):
        gw.client().put_object(Bucket="snfactory", Key=f"nights/raw/night-{n}/a.fits",
                               Body=b"x")
    kubectl.apply(_secret(ns, gw))
    stage = {"name": "calib", "pool": kwok_pool, "image": "busybox:1.36",
             "forEach": {"fromS3": {"storage": "raw", "prefix": "raw/", "suffix": ".fits"}},
             "steps": [{"name": "main", "command": ["true"]}],
             "inputs": [{"storage": "raw", "path": "raw/{item}"}],
             "resources": {"requests": {"cpu": "100m"}}, "podAnnotations": dict(KWOK_FAST)}
    storage_entry = [{"name": "raw", "sharedStorage": "raw-s3"}]
    # The run first: it waits for its storage, naming the field.
    kubectl.apply(pipelinerun("first", ns, [stage], storage=storage_entry))
    waiting = wait_progressing(kube, ns, "first", "WaitingForStorage", timeout=30)
    assert waiting["message"].startswith("spec.storage[0].sharedStorage: no SharedStorage "
                                         "'raw-s3'")
    assert not kube.list("batch/v1", "Job", ns)
    kubectl.apply(storage(ns, "raw-s3", {
        "type": "s3", "s3": {"bucket": "snfactory", "prefix": "nights/", "endpoint": gw.endpoint,
                             "region": "us-east-1", "credentialsSecret": "s3-keys",
                             "cache": {"size": "3Gi"}}}))
    wait_ready(kube, storage_operator, ns, "raw-s3", 60)
    # KWOK does not run the runner's init containers and sidecar to completion: what
    # is checked here is what the operator did with the storage, not the pods.
    run = wait_phase(kube, ns, "first", {"Running", "Succeeded"}, 120)
    assert run["status"]["total"] == 3, "items listed from versitygw through the storage"
    (job,) = kube.list("batch/v1", "Job", ns)
    pod = job["spec"]["template"]["spec"]
    stage_in = next(c for c in pod["initContainers"] if c["name"] == "nightshift-stage-in")
    cfg = json.loads(next(e["value"] for e in stage_in["env"]
                          if e["name"] == names.ENV_RUNNER_CONFIG))
    raw = cfg["storages"]["raw"]
    assert (raw["kind"], raw["bucket"], raw["prefix"], raw["endpoint"]) == (
        "s3", "snfactory", "nights/", gw.endpoint)
    assert cfg["cacheMaxBytes"] == 3 * 2**30
    secret_refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in stage_in["env"]
                   if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]}
    assert secret_refs == {"s3-keys"}
    # A run that has not ended keeps the storage from being deleted.
    kubectl("-n", ns, "delete", "sharedstorage", "raw-s3", "--wait=false")
    in_use = wait_for("Deleting=True InUse", lambda: (
        c := condition(get(kube, ns, "raw-s3"), "Deleting")).get("reason") == "InUse" and c, 30)
    assert "PipelineRun(s) first use this SharedStorage" in in_use["message"]
    assert get(kube, ns, "raw-s3")["status"]["phase"] == "Deleting"
    kubectl("-n", ns, "patch", "pipelinerun", "first", "--type=merge", "-p",
            '{"spec": {"cancel": true}}')
    wait_phase(kube, ns, "first", {"Cancelled"}, 60)
    wait_for("the storage deleted once the run ended", lambda: gone(kube, ns, "raw-s3"), 60)
    # A Secret that is not there: the storage says so itself (before, it said Ready and
    # left each run to find out).
    kubectl.apply(storage(ns, "keyless", {
        "type": "s3", "s3": {"bucket": "snfactory", "endpoint": gw.endpoint,
                             "region": "us-east-1", "credentialsSecret": "no-such-keys"}}))

    def said() -> str | None:
        ready = condition(get(kube, ns, "keyless"), "Ready")
        return str(ready.get("message")) if ready.get("status") == "False" else None

    message = wait_for("keyless not Ready", said, 60)
    assert ("spec.s3.credentialsSecret: Secret no-such-keys does not exist (it needs "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)") in message, message
