"""`kubectl nightshift records`' pure part: rows from records the runner's own code builds,
the CSV, the cost column, and finding the archive in a rendered Job."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from nightshift.api import names
from nightshift.api.itemlookup import Item
from nightshift.api.runnerwire import CONFIG_VERSION, ArchiveConfig, RunnerConfig, StorageConfig
from nightshift.cli import plugin_records as prec
from nightshift.runner import record


def cfg() -> RunnerConfig:
    st = StorageConfig(name="data", kind="s3", bucket="b", prefix="proj/",
                       endpoint="http://127.0.0.1:7070", region="us-east-1",
                       access_key_env="NS_AK", secret_key_env="NS_SK")
    return RunnerConfig.from_json({
        "version": CONFIG_VERSION, "run": "night", "namespace": "ns", "stage": "reduce",
        "storages": {"data": st.to_json()}, "archive": {"storage": "data", "prefix": "_ns"},
        "inputs": [], "outputs": []})


def rec(index: int, start: str, end: str, **kw: Any) -> dict[str, Any]:
    item = Item(value=f"night-{index}", index=index, completion_index=index)
    return record.build(cfg(), item, 1, pod="p", node="n1", instanceType="c5.xlarge",
                        capacityType="spot", zone="us-east-1a", start=start, end=end,
                        phase="succeeded", exitCode=0, steps=[{"name": "s"}],
                        cpuSeconds=1.5, peakRssBytes=1024, **kw)


def test_row_seconds_cost_and_extra_scalars() -> None:
    r = prec.row(rec(3, "2026-01-01T00:00:00Z", "2026-01-01T00:01:40Z", bytesIn=10),
                 usd_per_second=0.001)
    assert (r["run"], r["stage"], r["index"], r["item"], r["attempt"]) == (
        "night", "reduce", 3, "night-3", 1)
    assert r["seconds"] == 100.0 and r["usd"] == pytest.approx(0.1)
    assert r["cpuSeconds"] == 1.5 and r["bytesIn"] == 10
    assert "steps" not in r and "previousAttempts" not in r  # lists stay in the JSON


def test_no_cost_without_a_price_and_no_seconds_without_an_end() -> None:
    r = prec.row(rec(0, "2026-01-01T00:00:00Z", ""), usd_per_second=None)
    assert r["seconds"] is None and r["usd"] is None


def test_csv_columns_first_then_the_rest_sorted() -> None:
    rows = [prec.row(rec(i, "2026-01-01T00:00:00Z", f"2026-01-01T00:00:0{i + 1}Z"), None)
            for i in range(2)]
    out = io.StringIO()
    prec.write_csv(rows, out)
    read = list(csv.DictReader(io.StringIO(out.getvalue())))
    header = out.getvalue().splitlines()[0].split(",")
    assert header[:len(prec.COLUMNS)] == list(prec.COLUMNS)
    assert header[len(prec.COLUMNS):] == sorted(header[len(prec.COLUMNS):])
    assert [(x["index"], x["seconds"], x["usd"]) for x in read] == [("0", "1.0", ""),
                                                                    ("1", "2.0", "")]


def test_usd_per_second_from_status() -> None:
    # 100 pod-seconds at 1e-3 $, then 50 at 3e-3 (spot fell back to on-demand): an item
    # costs the stage's mean, 0.25 / 150, not its last rate.
    status = {"cost": {"stages": [{"name": "reduce", "usdPerPodSecond": 3e-3,
                                   "usedUSD": 0.25, "podSeconds": 150.0,
                                   "pricedSeconds": 150.0},
                                  {"name": "other", "podSeconds": 10.0,
                                   "pricedSeconds": 0.0, "usedUSD": 0.0}]}}
    assert prec.usd_per_second(status, "reduce") == pytest.approx(0.25 / 150)
    assert prec.usd_per_second(status, "other") is None
    assert prec.usd_per_second({}, "reduce") is None


def job(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "night-reduce-1"}, "spec": {"template": {"spec": {
        "initContainers": [{"name": "stage-in", "env": env}],
        "containers": [{"name": "main"}]}}}}


def test_runner_config_and_secrets_from_the_job() -> None:
    env: list[dict[str, Any]] = [{"name": names.ENV_RUNNER_CONFIG, "value": cfg().dumps()},
           {"name": "NS_AK", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "ak"}}}]
    got = prec.runner_config(job(env))
    assert got is not None and got.archive == ArchiveConfig(storage="data", prefix="_ns")
    item = Item(value="", index=7, completion_index=7)
    assert record.record_key(got, item) == "proj/_ns/night/reduce/7.json"
    assert prec.secret_refs(job(env)) == {"NS_AK": ("s3", "ak")}
    assert prec.runner_config(job([])) is None


def test_bad_config_and_bad_record_say_where() -> None:
    with pytest.raises(prec.RecordsError, match="Job night-reduce-1: its runner config"):
        prec.runner_config(job([{"name": names.ENV_RUNNER_CONFIG, "value": "{"}]))
    with pytest.raises(prec.RecordsError, match=r"task record k/1\.json is not JSON"):
        prec.parse("k/1.json", b"not json")
