"""`kubectl nightshift records` against a run the operator rendered and a real S3 server.

The run's stage writes to an archive on versitygw; KWOK pods run no runner, so the test
writes the task records itself with the runner's own code (runner/record.py), for all
items but one. The plugin must find the archive through the stage Job the operator made,
read the keys from the Secret it names, fetch each record by key, and print one CSV row
per record, reporting the missing one.
"""

from __future__ import annotations

import base64
import csv
import io
from contextlib import redirect_stdout

import pytest

from nightshift.api.itemlookup import Item
from nightshift.aws.s3store import S3Store, client
from nightshift.cli import plugin
from nightshift.cli import plugin_records as prec
from nightshift.kube import Kube
from nightshift.runner import record
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import Cluster, OperatorProcess
from tests.integration.prutil import get_run, pipelinerun, stage
from tests.s3server import VersityGW, s3server

__all__ = ["s3server"]  # the fixture, used by name below

ITEMS = ["night-1", "night-2", "night-3", "night-4"]


def test_records_as_csv(cluster: Cluster, kube: Kube, kubectl: Kubectl,
                        operator: OperatorProcess, namespace: str, pool: str,
                        s3server: VersityGW, capsys: pytest.CaptureFixture[str]) -> None:
    s3server.client().create_bucket(Bucket="arch")
    kubectl.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"},
                   "data": {k: base64.b64encode(v.encode()).decode() for k, v in {
                       "AWS_ACCESS_KEY_ID": s3server.access_key,
                       "AWS_SECRET_ACCESS_KEY": s3server.secret_key}.items()}}, namespace)
    kubectl.apply(pipelinerun("rec", namespace, [
        stage("reduce", pool, forEach={"items": ITEMS},
              outputs=[{"storage": "arch", "path": "out/{item}/"}],
              podAnnotations={"pod-complete.stage.kwok.x-k8s.io/delay": "600s",
                              "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "600s"}),
    ], storage=[{"name": "arch", "s3": {"bucket": "arch", "prefix": "p/",
                                        "endpoint": s3server.endpoint,
                                        "credentialsSecret": "s3"}}],
        archive={"storage": "arch"}))
    job_name = wait_for("the stage's Job in status", lambda: (
        ((get_run(kube, namespace, "rec").get("status") or {}).get("stages") or [{}])[0]
        .get("jobName")), 60)

    # The records the runner would write, by the runner's code, at the keys it uses.
    job = kube.get("batch/v1", "Job", str(job_name), namespace)
    assert job is not None
    cfg = prec.runner_config(job)
    assert cfg is not None and cfg.archive is not None
    storage = cfg.storage("arch")
    env = {storage.access_key_env or "": s3server.access_key,
           storage.secret_key_env or "": s3server.secret_key}
    store = S3Store(storage, client(storage, env))
    for index, value in enumerate(ITEMS[:3]):
        item = Item(value=value, index=index, completion_index=index)
        rec = record.build(cfg, item, 1, pod=f"p{index}", node="kwok-node",
                           instanceType="c5.xlarge", capacityType="spot", zone="z",
                           start="2026-01-01T00:00:00Z", end=f"2026-01-01T00:0{index}:30Z",
                           phase="succeeded", exitCode=0, cpuSeconds=float(index))
        key = record.record_key(cfg, item)
        assert key == f"p/_nightshift/rec/reduce/{index}.json"
        record.write(store, key, rec)

    out = io.StringIO()
    with redirect_stdout(out):
        rc = plugin.main(["records", "rec", "-n", namespace, "--kubeconfig",
                          cluster.kubeconfig, "--credentials-from-secret"])
    assert rc == 0, capsys.readouterr().err
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["index"], r["item"], r["phase"], r["seconds"], r["cpuSeconds"]) for r in rows] == [
        ("0", "night-1", "succeeded", "30.0", "0.0"),
        ("1", "night-2", "succeeded", "90.0", "1.0"),
        ("2", "night-3", "succeeded", "150.0", "2.0")]
    assert "1 item(s) have no task record yet" in capsys.readouterr().err

    # A wrong stage is named, with the stages there are.
    with redirect_stdout(io.StringIO()):
        rc = plugin.main(["records", "rec", "-n", namespace, "--kubeconfig",
                          cluster.kubeconfig, "--stage", "nope"])
    assert rc == 1 and "no stage 'nope'" in capsys.readouterr().err
