"""kubectl nightshift commands end to end against an in-memory API that records each
call: what they print for a 100,000-item run, and that they read only the run, the
chunks they need and the stage's Jobs, never a list of all pods."""

from __future__ import annotations

import builtins
import copy
import io
import json
from typing import Any

import pytest
from rich.console import Console

from nightshift.api import names, ranges
from nightshift.cli import plugin
from nightshift.kube import Kube, KubeError
from nightshift.pipelinerun import doneset
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.plan import plan
from tests.unit import test_status_size as big
from tests.unit.test_plan import T0, advance, jobs_of, observe, with_status

N = big.N


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in
               (term.split("=", 1) for term in (selector or "").split(",") if term))


class FakeKube:
    """The Kube calls the plugin makes, answered from a list of objects."""

    def __init__(self, objects: list[dict[str, Any]], logs: dict[tuple[str, str], str]
                 ) -> None:
        self.objects = copy.deepcopy(objects)
        self.logs = logs
        self.calls: list[tuple[Any, ...]] = []
        self.bytes = 0
        self.conflicts = 0  # answer this many patches with 409, as a concurrent write would
        self.served = True  # whether the API server serves nightshift.io (discovery)
        self.refuse: KubeError | None = None  # answer every get with this error

    def _answer(self, value: Any) -> Any:
        self.bytes += len(json.dumps(value))
        return copy.deepcopy(value)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None
            ) -> dict[str, Any] | None:
        self.calls.append(("get", kind, name))
        if self.refuse is not None:
            raise self.refuse
        for o in self.objects:
            if o["kind"] == kind and o["metadata"]["name"] == name:
                return self._answer(o)  # type: ignore[no-any-return]
        return None

    def serves(self, api_version: str) -> bool:
        self.calls.append(("serves", api_version))
        return self.served

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None) -> builtins.list[dict[str, Any]]:
        self.calls.append(("list", kind, label_selector, limit))
        found = [o for o in self.objects if o["kind"] == kind and _matches(o, label_selector)]
        return self._answer(found[:limit] if limit else found)  # type: ignore[no-any-return]

    def list_metadata(self, api_version: str, kind: str, namespace: str | None = None,
                      label_selector: str | None = None) -> builtins.list[dict[str, Any]]:
        self.calls.append(("list_metadata", kind, label_selector))
        return self._answer([{"metadata": o["metadata"]} for o in self.objects  # type: ignore[no-any-return]
                             if o["kind"] == kind and _matches(o, label_selector)])

    def merge_patch(self, api_version: str, kind: str, name: str, namespace: str | None,
                    patch: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        self.calls.append(("patch", kind, name, json.dumps(patch, sort_keys=True)))
        obj = next(o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name)
        if self.conflicts:
            self.conflicts -= 1
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
            raise KubeError(409, "Conflict", "the object has been modified")
        if patch.get("metadata", {}).get("resourceVersion") not in (
                None, obj["metadata"]["resourceVersion"]):
            raise KubeError(409, "Conflict", "the object has been modified")
        obj["spec"].update(patch["spec"])
        return self._answer(obj)  # type: ignore[no-any-return]

    def pod_log(self, namespace: str, name: str, container: str | None = None,
                previous: bool = False, tail_lines: int | None = None) -> str:
        self.calls.append(("log", name, container, previous, tail_lines))
        return self.logs[(name, container or "")]


def pod(job: dict[str, Any], index: int, created: str, exit_code: int) -> dict[str, Any]:
    name = f"{job['metadata']['name']}-{index}-{created[-3:-1]}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "creationTimestamp": created, "labels": {
                **job["spec"]["template"]["metadata"]["labels"],
                "batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": {"initContainers": [{"name": "nightshift-stage-in"}],
                     "containers": [{"name": "main"}]},
            "status": {"initContainerStatuses": [{"name": "nightshift-stage-in", "state": {
                "terminated": {"exitCode": 0}}}], "containerStatuses": [{"name": "main", "state": {
                    "terminated": {"exitCode": exit_code}}}]}}


@pytest.fixture(scope="module")
def cluster() -> FakeKube:
    """big.worst_case_status, keeping its objects: split finished with 9,999 failures
    (every 10th item), invert halfway with 5,000, concat not started."""
    run = big._run()
    run["metadata"]["resourceVersion"] = "100"
    infos = big._items("split", "invert")
    p = plan(observe(run, items=infos))
    (split_job,) = jobs_of(p)
    failed = list(range(0, 99_990, 10))
    split_done = with_status(
        split_job, completedIndexes=ranges.compress(sorted(set(range(N)) - set(failed))),
        failedIndexes=ranges.compress(failed), conditions=[
            {"type": "Complete", "status": "True", "lastTransitionTime": "2025-03-01T13:00:00Z"}])
    samples = [{"index": i, "exitCode": 3, "reason": "Error", "message": f"bad night {i}"}
               for i in failed[:5]]
    run = advance(run, p)
    p = plan(observe(run, [split_done], items=infos, samples={"split": samples}))
    (invert_job,) = jobs_of(p)
    half = list(range(0, N // 2, 10))
    invert_running = with_status(
        invert_job, completedIndexes=ranges.compress(sorted(set(range(N // 2)) - set(half))),
        failedIndexes=ranges.compress(half), active=5000, ready=5000)
    run = advance(run, p)
    p = plan(observe(run, [split_done, invert_running], items=infos,
                     samples={"split": samples, "invert": samples}, now=T0))
    run = advance(run, p)
    ref = it.RunRef.of(run)
    cms = [cm for stage in ("split", "invert") for cm in it.items_configmaps(
        ref, stage, [f"{stage}-{i:06d}" for i in range(N)], last_step="main")]
    pods = [pod(split_done, 10, "2025-03-01T12:01:00Z", 3),
            pod(split_done, 10, "2025-03-01T12:02:00Z", 3),
            pod(split_done, 11, "2025-03-01T12:02:00Z", 0)]
    logs = {(pods[1]["metadata"]["name"], "main"): "reducing split-000010\nboom\n"}
    return FakeKube([run, split_done, invert_running, *cms, *pods], logs)


def call(kube: FakeKube, *argv: str, width: int = 120) -> tuple[int, str]:
    kube.calls.clear()
    kube.bytes = 0
    out = Console(width=width, file=io.StringIO(), color_system=None)
    err = Console(width=width, file=io.StringIO(), color_system=None)
    args = plugin.parser().parse_args([*argv, "-n", "physics"])
    code = plugin.dispatch(args, kube=kube, out=out, err=err)  # type: ignore[arg-type]
    return code, out.file.getvalue() + err.file.getvalue()  # type: ignore[attr-defined]


def test_status_reads_the_run_only(cluster: FakeKube, capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    code, out = call(cluster, "status", "nightly")
    assert code == 0 and cluster.calls == [("get", "PipelineRun", "nightly")]
    assert cluster.bytes < 20_000, "a 100k-item run's status is a few KB"
    assert "split: 9,999 failed" in out and "#0 exit 3 Error: bad night 0" in out
    code, _ = call(cluster, "status", "nightly", "-o", "json")
    s = json.loads(capsys.readouterr().out)
    assert [st["pending"] for st in s["stages"]] == [0, 45_000, 0]
    code, out = call(cluster, "status", "missing")
    assert code == 1 and "PipelineRun physics/missing not found" in out


def test_failed_items_of_a_truncated_stage_come_from_its_job(
        cluster: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = call(cluster, "items", "nightly", "--stage", "invert", "--failed", "-o", "json")
    assert code == 0
    (st,) = json.loads(capsys.readouterr().out)["stages"]
    assert len(st["items"]) == 5_000
    assert st["items"][0] == {"index": 0, "item": "invert-000000", "state": "failed",
                              "exitCode": 3, "reason": "Error", "message": "bad night 0"}
    assert st["items"][-1] == {"index": 49_990, "item": "invert-049990", "state": "failed"}
    # Failures all sit in the first chunk, so the second is never read; no pods listed.
    # The stage's record is cut: its done set is read too (absent here).
    first = it.items_configmap_name("nightly", "invert", 0)
    assert [c for c in cluster.calls if c[0] == "get"] == [
        ("get", "PipelineRun", "nightly"),
        ("get", "ConfigMap", doneset.configmap_name("nightly", "invert")),
        ("get", "ConfigMap", first)]
    assert not [c for c in cluster.calls if c[1] == "Pod"]


def test_all_items_with_states(cluster: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = call(cluster, "items", "nightly", "--stage", "invert")
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0] == "# stage invert (Running): 100,000 items"
    rows = [x.split() for x in lines[2:]]
    assert len(rows) == N
    assert rows[10][:3] == ["10", "failed", "invert-000010"]
    assert rows[11] == ["11", "succeeded", "invert-000011"]
    assert rows[N - 1] == [str(N - 1), "unfinished", "invert-099999"]
    states = [r[1] for r in rows]
    assert (states.count("succeeded"), states.count("failed"), states.count("unfinished")) == (
        45_000, 5_000, 50_000)
    code, _ = call(cluster, "items", "nightly", "--stage", "concat")
    assert "has not started" in capsys.readouterr().out
    code, out = call(cluster, "items", "nightly", "--stage", "nope")
    assert code == 1 and "its stages are split, invert, concat" in out


def test_logs_of_an_item_read_one_index_pods(cluster: FakeKube,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out = call(cluster, "logs", "nightly", "--stage", "split", "--item", "split-000010")
    assert code == 0, out
    assert capsys.readouterr().out == "reducing split-000010\nboom\n"
    pod_lists = [c for c in cluster.calls if c[1] == "Pod"]
    assert pod_lists == [("list", "Pod", "batch.kubernetes.io/job-completion-index=10,"
                          "nightshift.io/attempt=0,nightshift.io/pipeline-run=nightly,"
                          "nightshift.io/stage=split", plugin.POD_LIST_LIMIT)]
    assert "container main" in out and "2 pod(s)" in out
    code, out = call(cluster, "logs", "nightly", "--stage", "split", "--index", "12")
    assert code == 1 and "no pod of Job" in out
    code, out = call(cluster, "logs", "nightly", "--stage", "split", "--item", "nope")
    assert code == 1 and "has no item 'nope'" in out


def test_rerun_failed_decides_again_after_a_conflict(cluster: FakeKube) -> None:
    run = next(o for o in cluster.objects if o["kind"] == names.PIPELINERUN)
    kube = FakeKube([{**run, "status": {**run["status"], "phase": "Failed"}}], {})
    kube.conflicts = 1
    code, out = call(kube, "rerun-failed", "nightly")
    assert code == 0 and "rerun 1 requested" in out
    patches = [json.loads(c[3]) for c in kube.calls if c[0] == "patch"]
    assert [p["spec"] for p in patches] == [{"rerunFailed": 1}, {"rerunFailed": 1}]
    assert patches[0]["metadata"]["resourceVersion"] == "100"
    assert patches[1]["metadata"]["resourceVersion"] == "101"
    code, out = call(kube, "rerun-failed", "nightly")
    assert code == 0 and "already requested" in out
    assert not [c for c in kube.calls if c[0] == "patch"]


def test_cancel_needs_confirmation_off_a_terminal(cluster: FakeKube) -> None:
    code, out = call(cluster, "cancel", "nightly")
    assert code == 1 and "pass --yes" in out
    assert not [c for c in cluster.calls if c[0] == "patch"]
    code, out = call(cluster, "cost", "nightly")
    assert code == 0 and "cost is not recorded" in out


class Phases(FakeKube):
    """A run whose phase moves on with each read, as the operator would write it."""

    def __init__(self, run: dict[str, Any], phases: list[str]) -> None:
        super().__init__([run], {})
        self.phases = phases

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None
            ) -> dict[str, Any] | None:
        run = super().get(api_version, kind, name, namespace)
        assert run is not None
        run["status"]["phase"] = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
        return run


@pytest.mark.parametrize(("phases", "code"), [(["Running", "Running", "Succeeded"], 0),
                                              (["Running", "Failed"], 1)])
def test_watch_reads_the_run_until_it_ends(cluster: FakeKube, phases: list[str],
                                           code: int) -> None:
    run = next(o for o in cluster.objects if o["kind"] == names.PIPELINERUN)
    kube = Phases(run, list(phases))
    got, out = call(kube, "watch", "nightly", "--interval", "0")
    assert got == code
    assert kube.calls == [("get", "PipelineRun", "nightly")] * len(phases)
    # Off a terminal, Live prints the final view once.
    heads = [x for x in out.splitlines() if x.startswith("PipelineRun ")]
    assert heads and heads[-1].startswith(f"PipelineRun physics/nightly  {phases[-1]}  ")


def test_a_cluster_without_nightshift_is_not_a_missing_run(cluster: FakeKube) -> None:
    cluster.served = False  # the wrong context, or Nightshift not installed
    code, out = call(cluster, "status", "nightly-x")
    assert code == 1 and " ".join(out.split()) == (
        "error: this cluster does not serve nightshift.io/v1alpha1 PipelineRuns: is "
        "Nightshift installed here (its CRDs), or is another --context the one?"), out


def test_credentials_the_api_server_refuses_are_named(cluster: FakeKube) -> None:
    cluster.refuse = KubeError(401, "Unauthorized", "Unauthorized")
    code, out = call(cluster, "status", "nightly")
    assert code == 1 and " ".join(out.split()) == (
        "error: 401 Unauthorized: Unauthorized; the API server does not accept this "
        "context's credentials: they expired or are wrong (on EKS: aws eks "
        "update-kubeconfig, or log in again)"), out


def test_a_kubeconfig_that_is_not_yaml_is_named(tmp_path: Any) -> None:
    bad = tmp_path / "config"
    bad.write_text("apiVersion: v1\nclusters: [unclosed\n")
    with pytest.raises(KubeError) as err:
        Kube.for_user(str(bad))
    assert err.value.message.startswith(f"kubeconfig {bad}: cannot read it: "), err.value
