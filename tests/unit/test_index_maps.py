"""Retry Jobs whose completion-index map is their indexes ConfigMaps
(names.ANNOTATION_INDEXES_CONFIGMAPS: the skip list would not fit an annotation), as the
operator's passes and kubectl nightshift read them, against the in-memory API server;
and the plugin on batched stages."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

from nightshift.api import names, ranges
from nightshift.config import OperatorConfig
from nightshift.pipelinerun import doneset
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import reconcile as pipelinerun
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_plan import complete, failed, make_run
from tests.unit.test_plugin_cli import FakeKube, call, pod

CONFIG = OperatorConfig(runner_image="runner:dev")
RUN_PATH = RecordingKube().path(names.API_VERSION, names.PIPELINERUN, "physics", "nightly")


def _stage(name: str, count: int | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "busybox:1.36",
                           "steps": [{"name": "main", "command": ["true"]}], **extra}
    if count is not None:
        out["forEach"] = {"range": {"from": 0, "to": count - 1}}
    return out


def _jobs(kube: RecordingKube) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["metadata"]["labels"][names.LABEL_STAGE],
             o["metadata"]["labels"][names.LABEL_ATTEMPT]): o
            for o in kube.store.values() if o["kind"] == "Job"}


def _retry_after(kube: RecordingKube, good: str, bad: str
                 ) -> tuple[Callable[..., Any], dict[str, Any]]:
    """Stage a's first Job ends with `bad` failed (completion indexes); rerunFailed."""
    state = pipelinerun.LoopState()

    def again(fresh: bool = False) -> Any:
        return pipelinerun.reconcile(kube, CONFIG, "physics", "nightly",
                                     pipelinerun.LoopState() if fresh else state)

    again()
    j0 = _jobs(kube)[("a", "0")]
    j0["status"] = failed(j0, good, bad)["status"]
    again()
    kube.store[RUN_PATH]["spec"]["rerunFailed"] = 1
    again()
    return again, _jobs(kube)[("a", "1")]


def test_a_retry_of_ten_thousand_scattered_failures_runs_exactly_them_and_counts_right(
) -> None:
    m = 50_000
    bad = list(range(2, m, 5))
    kube = RecordingKube([make_run([_stage("a", m)])])
    again, retry = _retry_after(kube, ranges.compress(i for i in range(m) if i % 5 != 2),
                                ranges.compress(bad))
    ann = retry["metadata"]["annotations"]
    assert names.ANNOTATION_SKIP_ITEMS not in ann  # 120 KB of ranges: no annotation
    chunks = int(ann[names.ANNOTATION_INDEXES_CONFIGMAPS])
    lines = [int(x) for c in range(chunks) for v in kube.store[kube.path(
        "v1", "ConfigMap", "physics", it.indexes_configmap_name("nightly", "a", 1, c))
    ]["data"].values() for x in v.split()]
    assert lines == bad and retry["spec"]["completions"] == len(bad)
    # The retry ends with its first ten failed again; a restarted operator reads its map.
    n = len(bad)
    retry["status"] = failed(retry, f"10-{n - 1}", "0-9")["status"]
    again(fresh=True)
    (a,) = kube.store[RUN_PATH]["status"]["stages"]
    assert (a["phase"], a["succeeded"], a["failed"]) == ("Failed", m - 10, 10)
    assert ranges.parse(a["failedItems"]) == bad[:10]


def test_a_batched_retry_mapped_over_several_chunks_counts_its_first_and_last_items() -> None:
    m, k = 300_000, 3
    nb = m // k
    kube = RecordingKube([make_run([_stage("a", m, batch=k)])])
    # Every other batch failed: 150,000 items in 50,000 scattered batches.
    again, retry = _retry_after(kube, ranges.compress(range(0, nb, 2)),
                                ranges.compress(range(1, nb, 2)))
    bad = [i for b in range(1, nb, 2) for i in range(k * b, k * b + k)]
    assert int(retry["metadata"]["annotations"][names.ANNOTATION_INDEXES_CONFIGMAPS]) >= 2
    n = retry["spec"]["completions"]
    assert n == len(bad) // k
    # The first and the last batch of the retry fail again (first and last chunk).
    retry["status"] = failed(retry, f"1-{n - 2}", f"0,{n - 1}")["status"]
    again(fresh=True)
    (a,) = kube.store[RUN_PATH]["status"]["stages"]
    assert (a["succeeded"], a["failed"]) == (m - 6, 6)
    assert ranges.parse(a["failedItems"]) == bad[:3] + bad[-3:]


def test_a_retry_whose_map_is_gone_fails_its_stage_saying_why() -> None:
    m = 50_000
    bad = list(range(2, m, 5))
    kube = RecordingKube([make_run([_stage("a", m), _stage("b", dependsOn=["a"])])])
    again, retry = _retry_after(kube, ranges.compress(i for i in range(m) if i % 5 != 2),
                                ranges.compress(bad))
    for path in [p for p, o in kube.store.items()
                 if o["kind"] == "ConfigMap" and "-r1-indexes-" in o["metadata"]["name"]]:
        del kube.store[path]
    retry["status"] = complete(retry)["status"]
    again(fresh=True)
    a, b = kube.store[RUN_PATH]["status"]["stages"]
    assert (a["phase"], a["succeeded"], a.get("reason")) == ("Failed", m - len(bad),
                                                             "IndexMapMissing")
    assert b["phase"] in ("Pending", "Cancelled", "Skipped") or not b.get("attempt"), b
    assert "bump spec.rerunFailed" in a["message"]
    assert ("b", "0") not in _jobs(kube)  # nothing starts on items never counted


def _out(kube: FakeKube, *argv: str) -> Any:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code, err = call(kube, *argv)
    assert code == 0, err
    return json.loads(buf.getvalue())


def test_the_plugin_maps_a_retry_through_its_configmaps_and_logs_reads_only_that() -> None:
    m = 50_000
    bad = list(range(2, m, 5))
    kube = RecordingKube([make_run([_stage("a", m)])])
    again, retry = _retry_after(kube, ranges.compress(i for i in range(m) if i % 5 != 2),
                                ranges.compress(bad))
    n = retry["spec"]["completions"]
    retry["status"] = failed(retry, ranges.compress(range(0, n, 2)),
                             ranges.compress(range(1, n, 2)))["status"]
    again()
    still = [bad[c] for c in range(1, n, 2)]
    log = pod(retry, 1, "2025-03-01T12:01:00Z", 3)
    fk = FakeKube([*kube.store.values(), log], {(log["metadata"]["name"], "main"): "boom\n"})
    got = _out(fk, "items", "nightly", "--stage", "a", "--failed", "-o", "json")
    assert [r["index"] for r in got["stages"][0]["items"]] == still
    code, out = call(fk, "logs", "nightly", "--stage", "a", "--index", str(still[0]))
    assert code == 0 and f"pod {log['metadata']['name']} (item {still[0]}" in out, out
    read = [c[2] for c in fk.calls if c[:2] == ("get", "ConfigMap")]
    assert doneset.configmap_name("nightly", "a") not in read  # logs needs no done set


def test_the_plugin_counts_a_batched_stage_by_items_and_finds_a_batchs_pod() -> None:
    kube = RecordingKube([make_run([_stage("a", 30, batch=3)])])
    pipelinerun.reconcile(kube, CONFIG, "physics", "nightly", pipelinerun.LoopState())
    job = _jobs(kube)[("a", "0")]
    job["status"] = failed(job, "0-6,8-9", "7")["status"]  # batch 7: items 21-23
    log = pod(job, 7, "2025-03-01T12:01:00Z", 3)
    fk = FakeKube([*kube.store.values(), log], {(log["metadata"]["name"], "main"): "boom\n"})
    rows = _out(fk, "items", "nightly", "--stage", "a", "-o", "json")["stages"][0]["items"]
    assert [r["index"] for r in rows if r["state"] == "failed"] == [21, 22, 23]
    assert {r["state"] for r in rows if r["index"] not in (21, 22, 23)} == {"succeeded"}
    code, out = call(fk, "logs", "nightly", "--stage", "a", "--index", "22")
    assert code == 0 and f"pod {log['metadata']['name']} (item 22" in out, out
