"""The small real SNfactory run (examples/snfactory/real/pipelinerun.yaml) on the local
cluster's real node: each stage's Job exactly as the operator renders it (runner stage-in,
the reduction step, commit, task records) runs real pods against versitygw, the stages one
after the other as the operator would start them. Skipped without a real node or its
images, as tests/integration/test_real_node.py.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import yaml

from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import jobs
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift_localcluster.nodeconfig import NODE_NAME
from tests.clusterutil import Kubectl
from tests.examplesutil import EXAMPLES
from tests.integration.test_real_node import (
    RUNNER_IMAGE,
    gateway,
    on_real_node,
    real_node,
    s3_credentials,
    s3_on_gateway,
    wait_job,
)
from tests.s3server import VersityGW

__all__ = ["gateway", "real_node", "s3_on_gateway"]  # fixtures, used by name below

MANIFEST = EXAMPLES / "snfactory" / "real" / "pipelinerun.yaml"
# Three nights of fake CCD frames: night n has n + 1 frames of four pixel values.
NIGHTS = {f"night-{n:04d}": {f"frame-{k}.txt": f"{n} {k} 1.5 2\n" for k in range(n + 1)}
          for n in (1, 2, 3)}


def _run_stage(kubectl: Kubectl, spec: PipelineRunSpec, run: it.RunRef, index: int,
               namespace: str) -> float:
    stage = spec.stages[index]
    items = it.item_list(stage.for_each)
    for cm in it.items_configmaps(run, stage.name, items, last_step=stage.steps[-1].name):
        cm["metadata"].pop("ownerReferences", None)
        kubectl.apply(cm)
    job = jobs.render_job(
        run=run, spec=spec, stage=stage, attempt=0, completions=len(items),
        item_configmaps=[it.items_configmap_name(run.name, stage.name, 0)],
        parallelism=len(items), suspend=False, runner_image=RUNNER_IMAGE)
    # No PipelineRun owns it here (the garbage collector would delete an orphan).
    job["metadata"].pop("ownerReferences")
    on_real_node(job["spec"]["template"]["spec"])
    started = time.monotonic()
    kubectl.apply(job)
    wait_job(kubectl, job["metadata"]["name"], namespace, timeout=120)
    return time.monotonic() - started


def test_small_snfactory_run_on_the_real_node(real_node: dict[str, Any], kubectl: Kubectl,
                                              namespace: str,
                                              s3_on_gateway: VersityGW) -> None:
    gw = s3_on_gateway
    manifest = yaml.safe_load(MANIFEST.read_text())
    s3cfg = manifest["spec"]["storage"][0]["s3"]
    s3cfg["endpoint"] = gw.endpoint
    bucket, prefix = s3cfg["bucket"], s3cfg["prefix"]
    s3 = gw.client()
    s3.create_bucket(Bucket=bucket)
    for night, frames in NIGHTS.items():
        for frame, body in frames.items():
            s3.put_object(Bucket=bucket, Key=f"{prefix}nights/{night}/{frame}",
                          Body=body.encode())
    s3_credentials(kubectl, namespace, gw, s3cfg["credentialsSecret"])
    spec = PipelineRunSpec.model_validate(manifest["spec"])
    assert [s.name for s in spec.stages] == ["ifu", "summary"]
    run = it.RunRef(name=manifest["metadata"]["name"], namespace=namespace,
                    uid=str(uuid.uuid4()))
    seconds = [_run_stage(kubectl, spec, run, i, namespace) for i in range(len(spec.stages))]

    def get(key: str) -> Any:
        return json.loads(s3.get_object(Bucket=bucket, Key=prefix + key)["Body"].read())

    expected_flux = {}
    for index, (night, frames) in enumerate(NIGHTS.items()):
        flux = sum(sum(float(v) for v in body.split()) for body in frames.values())
        expected_flux[night] = flux
        assert get(f"ifu/{night}/night.json") == {"night": night, "frames": len(frames),
                                                   "flux": flux}
        assert [f["key"] for f in get(f"ifu/{night}/_SUCCESS")["files"]] == [
            f"{prefix}ifu/{night}/night.json"]
        record = get(f"_nightshift/{run.name}/ifu/{index}.json")
        assert (record["item"], record["phase"], record["exitCode"], record["node"]) == (
            night, "succeeded", 0, NODE_NAME)
    assert get("summary/summary.json") == {
        "nights": 3, "frames": sum(len(f) for f in NIGHTS.values()),
        "flux": sum(expected_flux.values())}
    print(f"snfactory real: ifu (3 nights) {seconds[0]:.0f} s, summary {seconds[1]:.0f} s")
