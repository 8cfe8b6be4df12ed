"""Item sources resolved by the operator: a ConfigMap list, an S3 prefix listing."""

from __future__ import annotations

import base64

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import Kubectl
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import (
    get_run,
    jobs,
    pipelinerun,
    stage,
    stage_status,
    wait_phase,
    wait_progressing,
)
from tests.s3server import VersityGW, s3server

__all__ = ["s3server"]  # the fixture, used by name below


def _frozen(kube: Kube, namespace: str, run: str) -> list[str]:
    cms = kube.list("v1", "ConfigMap", namespace, label_selector=f"{names.LABEL_RUN}={run}")
    assert len(cms) == 1, [c["metadata"]["name"] for c in cms]
    return str(cms[0]["data"][names.ITEMS_KEY]).splitlines()


def test_items_from_a_configmap(kube: Kube, kubectl: Kubectl, operator: OperatorProcess,
                                namespace: str, pool: str) -> None:
    kubectl.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bands"},
                   "data": {"items": "band-001\nband-002\n\nband-003\n"}}, namespace)
    kubectl.apply(pipelinerun("cm", namespace, [
        stage("invert", pool, forEach={"fromConfigMap": {"name": "bands"}})]))
    run = wait_phase(kube, namespace, "cm", {"Succeeded", "Failed"}, 90)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert stage_status(run, "invert")["total"] == 3
    assert _frozen(kube, namespace, "cm") == ["band-001", "band-002", "band-003"]


def test_missing_configmap_says_what_to_create(kube: Kube, kubectl: Kubectl,
                                               operator: OperatorProcess, namespace: str,
                                               pool: str) -> None:
    kubectl.apply(pipelinerun("nocm", namespace, [
        stage("invert", pool, forEach={"fromConfigMap": {"name": "later"}})]))
    cond = wait_progressing(kube, namespace, "nocm", "ItemsUnresolved")
    assert "fromConfigMap" in cond["message"] and "later" in cond["message"], cond
    # Creating the ConfigMap is enough: a later pass picks it up.
    kubectl.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"},
                   "data": {"items": "a\nb\n"}}, namespace)
    run = wait_phase(kube, namespace, "nocm", {"Succeeded"}, 90)
    assert stage_status(run, "invert")["total"] == 2


def test_items_from_an_s3_listing(kube: Kube, kubectl: Kubectl, operator: OperatorProcess,
                                  namespace: str, pool: str, s3server: VersityGW) -> None:
    s3 = s3server.client()
    s3.create_bucket(Bucket="raw")
    for key in ("nights/0001.fits", "nights/0002.fits", "nights/notes.txt",
                "nights/0003.fits", "other/0009.fits"):
        s3.put_object(Bucket="raw", Key=key, Body=b"x")
    kubectl.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"},
                   "data": {
                       "AWS_ACCESS_KEY_ID": base64.b64encode(
                           s3server.access_key.encode()).decode(),
                       "AWS_SECRET_ACCESS_KEY": base64.b64encode(
                           s3server.secret_key.encode()).decode()}}, namespace)

    def listing(name: str, suffix: str) -> None:
        """A run of one stage over the nights/ objects ending with `suffix`."""
        kubectl.apply(pipelinerun(name, namespace, [
            stage("reduce", pool, forEach={"fromS3": {"storage": "raw", "prefix": "nights/",
                                                      "suffix": suffix}}),
        ], storage=[{"name": "raw", "s3": {"bucket": "raw", "endpoint": s3server.endpoint,
                                           "credentialsSecret": "s3"}}]))

    listing("s3", ".fits")
    run = wait_phase(kube, namespace, "s3", {"Succeeded", "Failed"}, 90)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert _frozen(kube, namespace, "s3") == ["0001.fits", "0002.fits", "0003.fits"]
    # Frozen at start: objects written later do not change the run's items.
    s3.put_object(Bucket="raw", Key="nights/0004.fits", Body=b"x")
    assert _frozen(kube, namespace, "s3") == ["0001.fits", "0002.fits", "0003.fits"]
    # A suffix off by its case lists nothing: the run fails naming what it listed.
    listing("s3-none", ".FITS")
    run = wait_phase(kube, namespace, "s3-none", {"Succeeded", "Failed"}, 60)
    assert run["status"]["phase"] == "Failed", run["status"]
    conds = {c["type"]: c for c in run["status"]["conditions"]}
    for kind in ("Invalid", "Failed"):  # both True, with the same words, as the phase says
        assert (conds[kind]["status"], conds[kind]["reason"]) == ("True", "InvalidItems")
        assert ("stage reduce: spec.stages[0].forEach.fromS3: s3://raw/nights/*.FITS lists "
                "no objects") in conds[kind]["message"], conds[kind]


def test_missing_service_account_holds_the_stage_naming_it(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    """Without this check the Job makes no pod at all and only its events say why."""
    kubectl.apply(pipelinerun("nosa", namespace, [
        stage("calib", pool, serviceAccountName="pipeline")]))
    cond = wait_progressing(kube, namespace, "nosa", "WaitingForServiceAccount")
    assert cond["message"].startswith(
        "spec.stages[0].serviceAccountName: no ServiceAccount 'pipeline'"), cond
    assert not kube.list("batch/v1", "Job", namespace)
    kubectl("create", "serviceaccount", "pipeline", "-n", namespace)
    run = wait_phase(kube, namespace, "nosa", {"Succeeded"}, 90)
    assert stage_status(run, "calib")["total"] == 4


def test_items_found_invalid_while_a_branch_runs_fail_the_run_once_it_stops(
        kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        pool: str) -> None:
    """science's items (a binary key) are invalid when calib is done and slow still runs:
    slow is not cut off, nothing new starts, and it still obeys spec.cancel."""
    kubectl.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"},
                   "binaryData": {"items": base64.b64encode(b"\xff\xfe\x00n1\n").decode()}},
                  namespace)
    # Ended by the cancel below, not by KWOK (which takes the jitter bound itself when
    # it is not above the delay).
    slow = {"pod-complete.stage.kwok.x-k8s.io/delay": "300s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "300s"}
    kubectl.apply(pipelinerun("branch", namespace, [
        stage("slow", pool, 2, podAnnotations=slow),
        stage("calib", pool, 1),
        stage("science", pool, dependsOn=["calib"],
              forEach={"fromConfigMap": {"name": "bad", "key": "items"}})]))
    cond = wait_progressing(kube, namespace, "branch", "Invalid", "stage science", 90)
    assert cond["status"] == "True" and "the run is Failed once slow ends" in cond["message"]
    run = get_run(kube, namespace, "branch")
    assert run["status"]["phase"] == "Running", run["status"]
    invalid = {c["type"]: c for c in run["status"]["conditions"]}["Invalid"]
    assert (invalid["status"], invalid["reason"]) == ("True", "InvalidItems"), invalid
    assert "binary data, not UTF-8 text" in invalid["message"]
    assert stage_status(run, "slow")["phase"] == "Running"
    assert sorted(j["metadata"]["labels"][names.LABEL_STAGE]
                  for j in jobs(kube, namespace, "branch")) == ["calib", "slow"]
    kubectl("patch", "pipelinerun", "branch", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"cancel": true}}')
    run = wait_phase(kube, namespace, "branch", {"Failed"}, 60)
    failed = {c["type"]: c for c in run["status"]["conditions"]}["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "InvalidItems"), failed
    (slow_job,) = [j for j in jobs(kube, namespace, "branch")
                   if j["metadata"]["labels"][names.LABEL_STAGE] == "slow"]
    assert slow_job["spec"]["suspend"] is True, "cancel reached the running Job"
