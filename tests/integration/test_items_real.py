"""Matrices, ranges, argv substitution and gathered inputs in real pods on the real node:
run.sh and a range's inline wrapper in our runner image's /bin/sh, the runner's stage-in
against versitygw; and what the real kubelet says of pods that cannot start (an image,
a volume). The Jobs are rendered as the operator renders them (pipelinerun/jobs.py),
items frozen as it freezes them; skipped without the real node or its images, as
test_real_node.py."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nightshift.pipelinerun import batch, jobs, stalled, unmounted
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.samples import failure_sample
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.clusterutil import Kubectl, wait_for
from tests.integration.test_real_node import (
    BUCKET,
    RUNNER_IMAGE,
    gateway,
    on_real_node,
    real_node,
    s3_credentials,
    s3_on_gateway,
    s3_storage,
    wait_job,
)
from tests.s3server import VersityGW

__all__ = ["gateway", "real_node", "s3_on_gateway"]  # fixtures, used by name below

# Shell syntax that must reach the step as bytes, never run.
HOSTILE = "$(touch pwned) `id` 'q' \"d\" * ;x"  # no '/': matrix values may not hold one


def _run(kubectl: Kubectl, spec: PipelineRunSpec, namespace: str, stage_index: int,
         frozen: dict[str, list[str]]) -> str:
    """Freeze each stage's items, render stage `stage_index`'s Job, run it to the end."""
    name = _start(kubectl, spec, namespace, stage_index, frozen)
    wait_job(kubectl, name, namespace, timeout=240)
    return name


def _start(kubectl: Kubectl, spec: PipelineRunSpec, namespace: str, stage_index: int,
           frozen: dict[str, list[str]], items_kept: bool = True) -> str:
    """Freeze each stage's items, render stage `stage_index`'s Job and create it
    (`items_kept` False: the items ConfigMaps are not there, as if deleted by hand)."""
    run = it.RunRef(f"r{uuid.uuid4().hex[:5]}", namespace, str(uuid.uuid4()))
    cms: dict[str, list[str]] = {}
    for stage_name, items in frozen.items():
        last = next(s for s in spec.stages if s.name == stage_name).steps[-1].name
        for cm in it.items_configmaps(run, stage_name, items, last_step=last):
            cm["metadata"].pop("ownerReferences", None)
            if items_kept:
                kubectl.apply(cm)
            cms.setdefault(stage_name, []).append(cm["metadata"]["name"])
    stage = spec.stages[stage_index]
    n = len(frozen[stage.name])
    manifest = jobs.render_job(
        run=run, spec=spec, stage=stage, attempt=0,
        completions=batch.completions(n, stage.batch),
        positions=n if stage.batch > 1 else None,
        item_configmaps=cms[stage.name], parallelism=2, suspend=False,
        runner_image=RUNNER_IMAGE,
        gather_configmaps={g: cms[g] for g in cms if g != stage.name})
    manifest["metadata"].pop("ownerReferences")
    on_real_node(manifest["spec"]["template"]["spec"])
    kubectl.apply(manifest)
    return str(manifest["metadata"]["name"])


def test_matrix_fields_and_argv_reach_the_step_as_data(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "bbp", "image": RUNNER_IMAGE,
        "forEach": {"matrix": {"source": ["northridge", HOSTILE], "site": ["LAX"]}},
        "steps": [{"name": "sim", "command": ["sh", "-c",
                                              'printf "%s|%s|%s|%s|%s\\n" "$@" '
                                              '"$NIGHTSHIFT_ITEM_SOURCE" "$NIGHTSHIFT_ITEM_SITE"',
                                              "sim"],
                   "args": ["{source}", "--site={site}", "{item}"]}]}]})
    items = it.item_list(spec.stages[0].for_each)
    assert items == ["LAX/northridge", f"LAX/{HOSTILE}"]  # fields in name order
    name = _run(kubectl, spec, namespace, 0, {"bbp": items})
    pods = _pods(kubectl, namespace, name)
    lines = sorted(kubectl("logs", p["metadata"]["name"], "-n", namespace).stdout.strip()
                   for p in pods)
    assert lines == sorted([
        "northridge|--site=LAX|LAX/northridge|northridge|LAX",
        f"{HOSTILE}|--site=LAX|LAX/{HOSTILE}|{HOSTILE}|LAX",
    ]), lines


def test_gathered_inputs_one_per_item_of_an_earlier_stage(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str,
        s3_on_gateway: VersityGW) -> None:
    gw = s3_on_gateway
    s3 = gw.client()
    days, bands = ["day-01", "day-02", "day-03"], ["b0", "b1"]
    for d in days:
        for b in bands:
            s3.put_object(Bucket=BUCKET, Key=f"proj/split/{d}/{b}/vis.txt",
                          Body=f"{d}:{b}\n".encode())
    s3_credentials(kubectl, namespace, gw)
    spec = PipelineRunSpec.model_validate({
        "storage": [s3_storage(gw, "work")],
        "stages": [
            {"name": "split", "image": RUNNER_IMAGE, "forEach": {"items": days},
             "steps": [{"name": "split", "command": ["true"]}]},
            {"name": "invert", "image": RUNNER_IMAGE, "dependsOn": ["split"],
             "forEach": {"items": bands},
             "inputs": [{"storage": "work", "path": "split/{gather}/{item}/",
                         "gather": "split", "cache": False}],
             "outputs": [{"storage": "work", "path": "cube/{item}/"}],
             # Every day's copy of this band, in day order.
             "steps": [{"name": "invert", "command": [
                 "sh", "-c", 'cat "$NIGHTSHIFT_INPUTS"/*/vis.txt > "$NIGHTSHIFT_OUTPUTS/cube.txt"'
             ]}]},
        ]})
    _run(kubectl, spec, namespace, 1, {"split": days, "invert": bands})
    for b in bands:
        body = s3.get_object(Bucket=BUCKET, Key=f"proj/cube/{b}/cube.txt")["Body"].read()
        assert body.decode() == "".join(f"{d}:{b}\n" for d in days)


def test_a_batch_runs_its_items_in_order_and_retries_one_in_place(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    """batch: 3 over 7 items: 3 pods; each item runs once in order with its own env and
    argv; item n-4 fails its first try (a marker in the pod's scratch) and is retried in
    the pod, so no pod fails."""
    items = [f"n-{i}" for i in range(7)]
    script = ('if [ "$1" = n-4 ] && [ ! -e /nightshift/work/tried ]; then '
              ': > /nightshift/work/tried; exit 3; fi; '
              'echo "$NIGHTSHIFT_ITEM_INDEX $NIGHTSHIFT_ITEM $1"')
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "proj", "image": RUNNER_IMAGE, "forEach": {"items": items}, "batch": 3,
        "retries": {"perItem": 2},
        "steps": [{"name": "project", "command": ["sh", "-c", script, "project"],
                   "args": ["{item}"]}]}]})
    name = _run(kubectl, spec, namespace, 0, {"proj": items})
    job = json.loads(kubectl("get", "job", name, "-n", namespace, "-o", "json").stdout)
    assert job["spec"]["completions"] == 3 and job["status"]["succeeded"] == 3
    assert not job["status"].get("failed"), job["status"]
    pods = _pods(kubectl, namespace, name)
    assert len(pods) == 3
    seen: list[str] = []
    for p in sorted(pods, key=lambda p: int(p["metadata"]["annotations"][
            "batch.kubernetes.io/job-completion-index"])):
        out = kubectl("logs", p["metadata"]["name"], "-n", namespace).stdout
        seen += [line for line in out.splitlines() if line.startswith(("0 ", "1 ", "2 ", "3 ",
                                                                       "4 ", "5 ", "6 "))]
    assert seen == [f"{i} n-{i} n-{i}" for i in range(7)], seen


def test_a_range_item_comes_from_the_index_without_the_items_volume(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    """A range stage's first attempt whose steps name no placeholder runs the inline
    wrapper (rangeitem.py) in the image's own /bin/sh: no items volume, each pod's item
    from its completion index, the format's literal text (printf's % and shell syntax)
    and the step's own arguments kept as bytes."""
    fmt = "n%s-{:03d} " + HOSTILE
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "nights", "image": RUNNER_IMAGE,
        "forEach": {"range": {"from": 5, "to": 11, "step": 3, "format": fmt}},
        "steps": [{"name": "show", "command": ["sh", "-c", 'echo "<$NIGHTSHIFT_ITEM_INDEX'
                                               '|$NIGHTSHIFT_ITEM|$1|$NIGHTSHIFT_STAGE>"',
                                               "show"], "args": [HOSTILE]}]}]})
    items = [fmt.format(n) for n in (5, 8, 11)]
    name = _run(kubectl, spec, namespace, 0, {"nights": items})
    pods = _pods(kubectl, namespace, name)
    assert len(pods) == 3
    seen = []
    for p in pods:
        assert "volumes" not in p["spec"] or not any(
            "configMap" in v or "projected" in v for v in p["spec"]["volumes"]), p["spec"]
        out = kubectl("logs", p["metadata"]["name"], "-n", namespace).stdout
        seen += re.findall(r"<(.*)>", out)
    assert sorted(seen) == [f"{i}|{x}|{HOSTILE}|nights" for i, x in enumerate(items)], seen


def _pods(kubectl: Kubectl, namespace: str, job: str) -> list[dict[str, Any]]:
    """The stage Job's pods, by its own selector (stage Jobs select on their labels)."""
    obj = kubectl.kube.get("batch/v1", "Job", job, namespace)
    assert obj is not None, f"Job {namespace}/{job} is gone"
    return kubectl.kube.list("v1", "Pod", namespace, label_selector=it.job_pods_selector(obj))


def test_a_failed_step_says_its_last_lines_in_the_sample(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    # terminationMessagePolicy FallbackToLogsOnError: the kubelet puts the failed step's
    # log tail in its termination message, which the run's failureSamples carry.
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "calib", "image": RUNNER_IMAGE, "forEach": {"items": ["2024-01-03"]},
        "retries": {"perItem": 0},
        # One stream: the runtime keeps each stream's order, not their order between them
        # (a first run here had the stderr line among the last stdout ones).
        "steps": [{"name": "main", "command": ["sh", "-c", 'for i in $(seq 1 100); do '
                   'echo "frame $i ok"; done; echo "ValueError: night $1 has no flats"; '
                   'exit 3', "calib", "{item}"]}]}]})
    name = _start(kubectl, spec, namespace, 0, {"calib": ["2024-01-03"]})

    def failed() -> dict[str, Any] | None:
        return next((p for p in _pods(kubectl, namespace, name)
                     if p["status"].get("phase") == "Failed"), None)

    pod = wait_for(f"a failed pod of {name}", failed, 120, interval=1)
    sample = failure_sample(pod)
    assert (sample["index"], sample["exitCode"], sample["reason"]) == (0, 3, "Error"), sample
    assert sample["message"].endswith("ValueError: night 2024-01-03 has no flats"), sample
    assert "frame 100 ok" in sample["message"] and len(sample["message"]) <= 240, sample


def test_an_image_the_node_cannot_get_is_named_with_its_field(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "calib", "image": "nightshift-runner:absent", "imagePullPolicy": "Never",
        "forEach": {"items": ["a"]}, "steps": [{"name": "main", "command": ["true"]}]}]})
    name = _start(kubectl, spec, namespace, 0, {"calib": ["a"]})

    def stuck() -> tuple[str, str] | None:
        for p in _pods(kubectl, namespace, name):
            if found := stalled.why(p, spec.stages[0], 0):
                return found
        return None

    reason, message = wait_for(f"the kubelet's reason for {name}'s pod", stuck, 120,
                               interval=1)
    assert reason == stalled.NOT_STARTING
    assert "container main: ErrImageNeverPull: " in message, message
    assert "nightshift-runner:absent" in message, message
    assert message.endswith("; check spec.stages[0].image"), message


def _events(kubectl: Kubectl, namespace: str, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return kubectl.kube.list("v1", "Event", namespace, field_selector=(
        f"involvedObject.uid={pod['metadata']['uid']}"))


def _volume_said(kubectl: Kubectl, namespace: str, job: str, spec: PipelineRunSpec,
                 part: str) -> tuple[str, str] | None:
    """The stage's line from its first pod that waits for its volumes, as the operator
    reads it, once it says `part`."""
    pod = unmounted.first(_pods(kubectl, namespace, job))
    if pod is None:
        return None
    found = unmounted.summary(spec.stages[0], 0, pod, _events(kubectl, namespace, pod),
                              datetime.now(UTC))
    return found if found and part in found[1] else None


def test_a_volume_the_kubelet_cannot_mount_is_named_from_the_pods_events(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    """A pvc storage whose volume the real kubelet cannot mount (a hostPath PV of type
    Directory where there is none): the pod is scheduled, gets no sandbox, and only its
    FailedMount event says why; unmounted.py reads that as the operator does."""
    pv = f"nowhere-{namespace}"
    kubectl.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                   "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                            "hostPath": {"path": f"/nonexistent/{pv}", "type": "Directory"},
                            "claimRef": {"namespace": namespace, "name": "data"}}})
    try:
        kubectl.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "data", "namespace": namespace},
                       "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                                "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}})
        spec = PipelineRunSpec.model_validate({
            "storage": [{"name": "survey", "pvc": {"claimName": "data"}}],
            "stages": [{"name": "calib", "image": RUNNER_IMAGE, "forEach": {"items": ["a"]},
                        "mounts": [{"storage": "survey", "mountPath": "/survey"}],
                        "steps": [{"name": "main", "command": ["true"]}]}]})
        name = _start(kubectl, spec, namespace, 0, {"calib": ["a"]})

        # Until the kubelet has tried the hostPath, its newest failure may be another
        # volume's (under load, "failed to sync configmap cache" for the items).
        reason, message = wait_for(
            f"the kubelet's FailedMount for {name}'s pod",
            lambda: _volume_said(kubectl, namespace, name, spec, f"/nonexistent/{pv}"), 120,
            interval=1)
        assert reason == unmounted.WAITING_FOR_VOLUMES
        assert " waits for its volumes: FailedMount: MountVolume.SetUp failed for volume " \
               in message, message
        assert f"/nonexistent/{pv}" in message, message
        print(message)  # what a user sees, for `pytest -s`
        assert message.endswith("; check the storages spec.stages[0] mounts and reads "
                                "(spec.storage, and a SharedStorage's status)"), message

        # Were other pods of the stage running, this one would be named once held for
        # STALL_SECONDS: the real kubelet's pod carries the time it was scheduled.
        def held() -> tuple[str, str] | None:
            pod = unmounted.held(_pods(kubectl, namespace, name), datetime.now(UTC))
            if pod is None:
                return None
            return unmounted.some_summary(spec.stages[0], 0, pod,
                                          _events(kubectl, namespace, pod), datetime.now(UTC))

        reason, some = wait_for(f"{name}'s pod held for {stalled.STALL_SECONDS:g} s", held,
                                stalled.STALL_SECONDS + 60, interval=1)
        assert reason == stalled.SOME_NOT_STARTING
        assert some.startswith("stage calib: some of its pods do not start while others "
                               "run: pod "), some
        assert " waits for its volumes: FailedMount: MountVolume.SetUp failed" in some, some
    finally:
        kubectl("delete", "pv", pv, "--wait=false", check=False)


def test_an_items_configmap_deleted_by_hand_is_named_from_the_pods_events(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    """The stage's items ConfigMap is gone: the real kubelet cannot set up the items
    volume, and the status names the ConfigMap and the way out, not the storages."""
    spec = PipelineRunSpec.model_validate({"stages": [{
        "name": "calib", "image": RUNNER_IMAGE, "forEach": {"items": ["a"]},
        "steps": [{"name": "main", "command": ["true"]}]}]})
    name = _start(kubectl, spec, namespace, 0, {"calib": ["a"]}, items_kept=False)

    reason, message = wait_for(
        f"the kubelet's FailedMount for {name}'s pod",
        lambda: _volume_said(kubectl, namespace, name, spec, "not found"), 120, interval=1)
    assert reason == unmounted.WAITING_FOR_VOLUMES
    print(message)  # what a user sees, for `pytest -s`
    assert re.search(r"the run's ConfigMap \S+-calib-items-0-\w+ \(its frozen items\) was "
                     r"deleted, and no pod of this stage starts without it: cancel the run "
                     r"\(spec.cancel: true\) and create a new one$", message), message


def test_a_pvc_archive_counts_attempts_and_keeps_each_ones_failed_outputs(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str,
        tmp_path: Path) -> None:
    """The task record on a pvc archive: stage-in reads the previous one (it mounts the
    archive too), so the retry is attempt 2 and the first attempt's failed outputs stay
    under their own prefix. The real node is this machine: the volume is a directory
    here (mode 0777: the pods run as 65532)."""
    root = tmp_path / "archive"
    root.mkdir()
    root.chmod(0o777)
    pv = f"archive-{namespace}"
    kubectl.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                   "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                            "hostPath": {"path": str(root), "type": "Directory"},
                            "claimRef": {"namespace": namespace, "name": "results"}}})
    try:
        kubectl.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "results", "namespace": namespace},
                       "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                                "volumeName": pv,
                                "resources": {"requests": {"storage": "1Gi"}}}})
        # The first try leaves a marker on the volume (mounted read-write in the step)
        # and fails with an output written; the second finds it and succeeds.
        script = ('echo "try" > "$NIGHTSHIFT_OUTPUTS/out.txt"; '
                  'if [ ! -e /results/tried ]; then : > /results/tried; exit 3; fi')
        spec = PipelineRunSpec.model_validate({
            "storage": [{"name": "results", "pvc": {"claimName": "results"}}],
            "archive": {"storage": "results"},
            "stages": [{"name": "calib", "image": RUNNER_IMAGE, "forEach": {"items": ["a"]},
                        "retries": {"perItem": 2},
                        "mounts": [{"storage": "results", "mountPath": "/results",
                                    "readOnly": False}],
                        "outputs": [{"storage": "results", "path": "out/{item}/"}],
                        "steps": [{"name": "main", "command": ["sh", "-c", script]}]}]})
        name = _run(kubectl, spec, namespace, 0, {"calib": ["a"]})
        job = json.loads(kubectl("get", "job", name, "-n", namespace, "-o", "json").stdout)
        assert job["status"].get("succeeded") == 1, job["status"]
        run = job["metadata"]["labels"]["nightshift.io/pipeline-run"]
        rec = json.loads((root / "_nightshift" / run / "calib" / "0.json").read_text())
        assert (rec["attempt"], rec["phase"]) == (2, "succeeded"), rec
        assert [a["attempt"] for a in rec["previousAttempts"]] == [1], rec
        assert (root / "out" / "a" / "out.txt").read_text() == "try\n"
        failed = sorted(str(p.relative_to(root)) for p in (root / "failed").rglob("out.txt"))
        assert len(failed) == 1 and "attempt-1" in failed[0], failed
    finally:
        kubectl("delete", "pvc", "results", "-n", namespace, "--wait=false", check=False)
        kubectl("delete", "pv", pv, "--wait=false", check=False)
