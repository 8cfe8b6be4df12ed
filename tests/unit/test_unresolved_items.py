"""A stage whose items do not resolve waits, named, while the run's other stages go on;
items that can never resolve, a Secret the operator may not read, a cluster without the
MPIJob kind and an MPI Operator that never acts each say what and where on the run, not
only in the operator's log."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import pytest

from nightshift.api import names
from nightshift.aws.s3 import S3Error, S3Target, S3TooManyError, list_keys, read_object
from nightshift.config import OperatorConfig
from nightshift.kube import KubeError
from nightshift.pipelinerun import itemsource, mpijob, stalled
from nightshift.pipelinerun import reconcile as pipelinerun
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.unit.test_chart_kubecalls import RecordingKube

NS = "physics"
CONFIG = OperatorConfig(runner_image="runner:dev")


def _stage(name: str, for_each: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "forEach": for_each,
            "steps": [{"name": "main", "command": ["true"]}], **kw}


def _run(stages: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": "nightly", "namespace": NS, "uid": "run-uid",
                         "generation": 1},
            "spec": {"stages": stages, **spec}}


def _cm(data: dict[str, str] | None = None,
        binary: dict[str, str] | None = None) -> dict[str, Any]:
    cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "nights", "namespace": NS}}
    if data:
        cm["data"] = data
    if binary:
        cm["binaryData"] = binary
    return cm


def _pass(kube: RecordingKube, config: OperatorConfig = CONFIG
          ) -> tuple[dict[str, Any], list[str]]:
    pipelinerun.reconcile(kube, config, NS, "nightly", pipelinerun.LoopState())
    run = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, NS, "nightly")]
    jobs = sorted(o["metadata"]["labels"][names.LABEL_STAGE] for o in kube.store.values()
                  if o["kind"] in ("Job", "MPIJob"))
    return run.get("status") or {}, jobs


def _run_spec(kube: RecordingKube) -> dict[str, Any]:
    return dict(kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, NS,
                                     "nightly")]["spec"])


def _cond(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == kind)


def test_a_waiting_stage_holds_back_no_other_stage() -> None:
    # calib's items are in the spec; science's ConfigMap is not made yet.
    kube = RecordingKube([_run([
        _stage("calib", {"items": ["n1", "n2"]}),
        _stage("science", {"fromConfigMap": {"name": "nights", "key": "items"}}),
    ])])
    status, jobs = _pass(kube)
    assert jobs == ["calib"], "the resolvable stage starts in the same pass"
    assert status["phase"] == "Running"
    progressing = _cond(status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "ItemsUnresolved")
    assert progressing["message"].startswith(
        "stage science: spec.stages[1].forEach.fromConfigMap: ConfigMap physics/nights does "
        "not exist")
    # Created, the ConfigMap is picked up: science starts beside the running calib.
    kube.put(_cm({"items": "n1\nn2\n"}))
    status, jobs = _pass(kube)
    assert jobs == ["calib", "science"]
    assert _cond(status, "Progressing")["status"] == "True"


def test_binary_items_fail_the_run_naming_the_key_and_start_nothing() -> None:
    kube = RecordingKube([
        _run([_stage("calib", {"items": ["n1"]}),
              _stage("science", {"fromConfigMap": {"name": "nights", "key": "items"}})]),
        _cm(binary={"items": base64.b64encode(b"\xff\xfe\x00n1\n").decode()})])
    status, jobs = _pass(kube)
    assert jobs == []
    assert status["phase"] == "Failed"
    invalid = _cond(status, "Invalid")
    assert invalid["reason"] == "InvalidItems"
    assert invalid["message"].startswith(
        "stage science: spec.stages[1].forEach.fromConfigMap.key: ConfigMap nights key "
        "'items' is binary data, not UTF-8 text")
    assert "name a key that holds one item per line" in invalid["message"]


class Forbidding(RecordingKube):
    """RecordingKube whose API server refuses the operator some reads or writes."""

    def __init__(self, objects: Sequence[dict[str, Any]], refuse: str, status: int) -> None:
        super().__init__(objects)
        self.refuse, self.status = refuse, status

    def _call(self, method: str, path: str, body: Any = None,
              query: Sequence[tuple[str, Any]] = (), content_type: str | None = None,
              accept: str = "application/json") -> Any:
        if self.refuse in path:
            reason = "Forbidden" if self.status == 403 else "NotFound"
            raise KubeError(self.status, reason, f"{path}: refused ({self.status})")
        return super()._call(method, path, body, query, content_type, accept)


def test_a_secret_the_operator_may_not_read_waits_naming_the_grant() -> None:
    s3 = {"bucket": "raw", "credentialsSecret": "keys"}
    kube = Forbidding([_run([_stage("calib", {"fromS3": {"storage": "raw"}})],
                            storage=[{"name": "raw", "s3": s3}])],
                      refuse="/secrets/keys", status=403)
    status, jobs = _pass(kube)
    assert jobs == []
    assert status["phase"] == "Pending", "a grant given later starts the run"
    progressing = _cond(status, "Progressing")
    assert progressing["reason"] == "ItemsUnresolved"
    assert "the operator may not read Secret keys (403 Forbidden)" in progressing["message"]
    assert "operator.secretNames" in progressing["message"]
    assert not any(c["type"] == "Invalid" and c["status"] == "True"
                   for c in status["conditions"])


def test_an_mpi_stage_without_the_mpijob_kind_names_the_operator_to_install() -> None:
    kube = Forbidding([_run([{"name": "ep", "image": "mpi:dev", "mpi": {"workers": 2},
                              "steps": [{"name": "ep", "command": ["ep", "S"]}]}])],
                      refuse="/apis/kubeflow.org/", status=404)
    status, _ = _pass(kube)
    assert status["phase"] == "Failed"
    message = _cond(status, "Invalid")["message"]
    assert message.startswith("stage ep's mpi (MPIJob ")
    assert ("this cluster has no MPIJob kind (kubeflow.org/v2beta1); install the Kubeflow "
            "MPI Operator (docs/mpi.md)") in message


def test_a_listing_too_long_fails_the_run_naming_the_fix(monkeypatch: Any) -> None:
    def too_many(*_: Any, **__: Any) -> list[str]:
        raise S3TooManyError("more than 500000 objects under s3://raw/nights/")

    monkeypatch.setattr(itemsource, "list_keys", too_many)
    kube = RecordingKube([_run([_stage("calib", {"fromS3": {"storage": "raw"}})],
                               storage=[{"name": "raw", "s3": {"bucket": "raw"}}]),
                          ])
    status, jobs = _pass(kube, OperatorConfig(runner_image="runner:dev",
                                              s3_operator_identity=True))
    assert jobs == [] and status["phase"] == "Failed"
    assert _cond(status, "Invalid")["message"] == (
        "stage calib: spec.stages[0].forEach.fromS3: more than 500000 objects under "
        "s3://raw/nights/; narrow forEach.fromS3.prefix or .suffix, or split the stage")


def test_a_malformed_region_is_an_s3_error_not_a_crash() -> None:
    target = S3Target(bucket="raw", region="us_west_2", access_key="a", secret_key="s")
    with pytest.raises(S3Error, match="us_west_2"):
        list_keys(target, "nights/")
    with pytest.raises(S3Error, match="us_west_2"):
        read_object(target, "nights.txt", 1024)


def test_an_mpijob_the_mpi_operator_never_synced_is_named_after_the_stall() -> None:
    kube = RecordingKube([_run([{"name": "ep", "image": "mpi:dev", "mpi": {"workers": 2},
                                 "steps": [{"name": "ep", "command": ["ep", "S"]}]}])])
    state = pipelinerun.LoopState()
    pipelinerun.reconcile(kube, CONFIG, NS, "nightly", state)
    [mpi] = [o for o in kube.store.values() if o["kind"] == "MPIJob"]
    name = mpi["metadata"]["name"]
    pipelinerun.reconcile(kube, CONFIG, NS, "nightly", state)
    state.pods.stalls[name].since -= stalled.STALL_SECONDS
    pipelinerun.reconcile(kube, CONFIG, NS, "nightly", state)
    status = kube.store[kube.path(names.API_VERSION, names.PIPELINERUN, NS, "nightly")]["status"]
    progressing = _cond(status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "WaitingForMPIOperator")
    assert progressing["message"].startswith(
        f"stage ep: the MPI Operator has not acted on MPIJob {name} in 30 s (it has no "
        "status); check that the Kubeflow MPI Operator's controller runs")
    assert status["stages"][0]["waiting"] == progressing["message"]
    # Synced (its Created condition), the stage is no longer said to wait for it.
    mpi["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
    kube.put(mpi)
    stage = PipelineRunSpec.model_validate(_run_spec(kube)).stages[0]
    assert stalled.mpi_unsynced(stage, mpijob.as_job(mpi)) is None


def test_a_secret_that_is_not_text_waits_naming_it() -> None:
    s3 = {"bucket": "raw", "credentialsSecret": "keys"}
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "keys", "namespace": NS},
              "data": {"AWS_ACCESS_KEY_ID": base64.b64encode(b"\xff\xfe").decode(),
                       "AWS_SECRET_ACCESS_KEY": base64.b64encode(b"s").decode()}}
    kube = RecordingKube([_run([_stage("calib", {"fromS3": {"storage": "raw"}})],
                               storage=[{"name": "raw", "s3": s3}]), secret])
    status, jobs = _pass(kube)
    assert jobs == [] and status["phase"] == "Pending"
    progressing = _cond(status, "Progressing")
    assert progressing["reason"] == "ItemsUnresolved"
    assert ("storage 'raw': Secret keys's AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not "
            "UTF-8 text; store the keys as plain text") in progressing["message"]


def test_configmap_items_split_as_run_sh_splits_and_a_missing_key_names_the_keys() -> None:
    # A byte-order mark is not part of the first item; only newlines split items (a
    # form feed does not, as in run.sh and fromFile); a missing key lists the keys.
    spec = PipelineRunSpec.model_validate({"stages": [
        _stage("science", {"fromConfigMap": {"name": "nights", "key": "items"}})]})
    kube = RecordingKube([_cm({"items": "\ufeffm17-0001.fits\r\nm17\x0c0002.fits\n\n"
                                         "m17-0003.fits\rm17-0004.fits\r"})])
    assert itemsource.resolve(kube, NS, spec, spec.stages[0], CONFIG) == [
        "m17-0001.fits", "m17\x0c0002.fits", "m17-0003.fits", "m17-0004.fits"]
    kube = RecordingKube([_cm({"nights.txt": "n1\n"})])
    with pytest.raises(itemsource.ResolveError) as e:
        itemsource.resolve(kube, NS, spec, spec.stages[0], CONFIG)
    assert "has no key 'items' (its keys: nights.txt); name one in " \
        "forEach.fromConfigMap.key" in str(e.value)


def test_a_repeated_item_fails_the_run_naming_both_places() -> None:
    kube = RecordingKube([
        _run([_stage("science", {"fromConfigMap": {"name": "nights", "key": "items"}},
                     outputs=[{"path": "out/{item}/", "storage": "results"}])],
             storage=[{"name": "results", "s3": {"bucket": "results", "region": "us-west-2"}}]),
        _cm({"items": "n1\nn2\nn1\n"})])
    status, jobs = _pass(kube)
    assert jobs == [] and status["phase"] == "Failed"
    assert "spec.stages[0].forEach[2]: 'n1' repeats item 0; list each item once" in \
        _cond(status, "Invalid")["message"]


class ImmutableKube(RecordingKube):
    """Refuses, as the API server does, new data applied over an immutable ConfigMap."""

    def _call(self, method: str, path: str, body: Any = None,
              query: Sequence[tuple[str, Any]] = (), content_type: str | None = None,
              accept: str = "application/json") -> Any:
        old = self.store.get(path)
        if (method == "PATCH" and content_type == "application/apply-patch+yaml" and old
                and old.get("immutable") and old.get("data") != body.get("data")):
            raise KubeError(422, "Invalid", f"ConfigMap {path}: field is immutable when "
                            "`immutable` is set")
        return super()._call(method, path, body, query, content_type, accept)


def test_a_freeze_cut_short_is_redone_from_the_source_as_it_is_now() -> None:
    # A freeze applied chunk 0 of 2 and the operator stopped; meanwhile the list grew.
    kube = ImmutableKube([
        _run([_stage("science", {"fromConfigMap": {"name": "nights", "key": "items"}})]),
        _cm({"items": "n1\nn2\n"})])
    _pass(kube)
    (path,) = [p for p in kube.store if "-items-0" in p]
    kube.store[path]["metadata"]["annotations"][names.ANNOTATION_ITEMS_TOTAL] = "5"
    for p in [p for p in kube.store if "/jobs/" in p]:
        del kube.store[p]  # as if the Job was never made
    kube.put(_cm({"items": "n1\nn2\nn3\n"}))
    status, jobs = _pass(kube)
    assert jobs == ["science"] and status["phase"] == "Running", status
    assert kube.store[path]["data"]["items"] == "n1\nn2\nn3\n"
