"""Item expansion, ConfigMap chunks, and run.sh executed by a real /bin/sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nightshift.api import itemlookup, names
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.spec import ForEach, RangeSource

RUN = it.RunRef(name="nightly", namespace="physics", uid="uid-1")


def test_range_expands_with_format() -> None:
    fe = ForEach(range=RangeSource.model_validate({"from": 1, "to": 700, "format": "night-{:04d}"}))
    got = it.item_list(fe)
    assert len(got) == 700 and got[0] == "night-0001" and got[-1] == "night-0700"
    every_five = RangeSource.model_validate({"from": 0, "to": 10, "step": 5})
    assert it.item_list(ForEach(range=every_five)) == ["0", "5", "10"]


def test_inline_items_and_no_source() -> None:
    assert it.item_list(ForEach(items=["a", "b"])) == ["a", "b"]
    assert it.item_list(None) == ["0"]


@pytest.mark.parametrize(("fmt", "ok"), [
    ("{}", True), ("night-{:04d}", True), ("{0:x}", True), ("{:>8}", True),
    ("{}-{}", False), ("{name}", False), ("plain", False), ("{:s}", False), ("{", False),
    ("{0[1]}", False),
])
def test_format_problem(fmt: str, ok: bool) -> None:
    assert (it.format_problem(fmt) is None) == ok


def test_chunks_stay_under_the_configmap_limit_at_100k_items() -> None:
    items = [f"day-{i:06d}/band-{i % 7:02d}" for i in range(100_000)]  # ~2.4 MB
    cms = it.items_configmaps(RUN, "split", items, last_step="main")
    assert len(cms) == 3
    lines: list[str] = []
    for cm in cms:
        size = sum(len(v.encode()) for v in cm["data"].values())
        assert size < 1_000_000
        key = next(k for k in cm["data"] if k.startswith(names.ITEMS_KEY))
        start = int(cm["metadata"]["annotations"][names.ANNOTATION_ITEM_START])
        assert key == itemlookup.chunk_key(names.ITEMS_KEY, start) and start == len(lines)
        lines += cm["data"][key].splitlines()
        assert cm["metadata"]["annotations"][names.ANNOTATION_ITEMS_TOTAL] == "100000"
    assert lines == items
    assert names.RUN_SH_KEY in cms[0]["data"] and names.RUN_SH_KEY not in cms[1]["data"]


def test_configmap_metadata() -> None:
    cm = it.items_configmaps(RUN, "ifu", ["a"], last_step="main")[0]
    meta = cm["metadata"]
    assert meta["name"] == it.items_configmap_name("nightly", "ifu", 0)
    assert meta["ownerReferences"] == [{
        "apiVersion": "nightshift.io/v1alpha1", "kind": "PipelineRun", "name": "nightly",
        "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]
    assert meta["labels"][names.LABEL_RUN] == "nightly"
    assert meta["labels"][names.LABEL_STAGE] == "ifu"
    assert meta["labels"][names.LABEL_MANAGED_BY] == "nightshift"
    assert meta["annotations"][names.ANNOTATION_ITEM_COUNT] == "1"
    assert cm["immutable"] is True


def test_names_are_dns_labels_with_room_for_the_index() -> None:
    long = "r" * 63
    name = it.job_name(long, "s" * 40, 12)
    assert len(name) <= it.JOB_NAME_MAX and len(f"{name}-999999") <= 63
    assert it.job_name("a-b", "c", 0) != it.job_name("a", "b-c", 0)
    assert it.job_name("nightly", "ifu", 0) == it.job_name("nightly", "ifu", 0)
    assert it.job_name("nightly", "ifu", 0) != it.job_name("nightly", "ifu", 1)
    assert it.job_name("run.v2", "ifu", 0).startswith("run-v2-ifu-")
    assert len(it.items_configmap_name(long, "s" * 40, 3)) <= 63


# --- run.sh, executed -------------------------------------------------------------


def install(tmp: Path, cms: list[dict[str, object]]) -> Path:
    """Lay out a projected volume of these ConfigMaps the way the kubelet does."""
    for cm in cms:
        for key, value in cm["data"].items():  # type: ignore[attr-defined]
            (tmp / key).write_text(value)
    return tmp / names.RUN_SH_KEY


def sh(script: Path, index: int, path: str | None = None) -> dict[str, str]:
    env = {"JOB_COMPLETION_INDEX": str(index), "PATH": path or "/usr/bin:/bin"}
    out = subprocess.run(["/bin/sh", str(script), "main", "--", "/usr/bin/env"], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_run_sh_maps_index_to_item(tmp_path: Path) -> None:
    items = ["night-0001", "two words; $(rm -rf /) `x` 'q' \"d\"", "night-0003"]
    script = install(tmp_path, it.items_configmaps(RUN, "ifu", items, last_step="main"))
    for i, item in enumerate(items):
        env = sh(script, i)
        assert env[names.ENV_ITEM] == item
        assert env[names.ENV_ITEM_INDEX] == str(i)


def test_run_sh_pure_sh_fallback_without_sed(tmp_path: Path) -> None:
    items = ["a", "b  ", "c\\n"]
    script = install(tmp_path, it.items_configmaps(RUN, "ifu", items, last_step="main"))
    for i, item in enumerate(items):
        assert sh(script, i, path="/nonexistent")[names.ENV_ITEM] == item


def test_run_sh_across_chunks_and_retry_indexes(tmp_path: Path) -> None:
    items = [f"item-{i:05d}-" + "x" * 40 for i in range(40_000)]  # ~2.1 MB
    cms = it.items_configmaps(RUN, "ifu", items, last_step="main")
    assert len(cms) == 3
    starts = [int(c["metadata"]["annotations"][names.ANNOTATION_ITEM_START]) for c in cms]
    second = starts[1]
    script = install(tmp_path, cms)
    for i in (0, starts[1] - 1, starts[1], starts[2] - 1, starts[2], 39_999):
        assert sh(script, i)[names.ENV_ITEM] == items[i]
    assert sh(script, starts[2] + 1, path="/nonexistent")[names.ENV_ITEM] == items[starts[2] + 1]
    # A retry Job: completion index k runs original index failed[k].
    failed = [7, second, 39_998]
    install(tmp_path, it.indexes_configmaps(RUN, "ifu", 1, failed))
    for k, orig in enumerate(failed):
        env = sh(script, k)
        assert env[names.ENV_ITEM] == items[orig]
        assert env[names.ENV_ITEM_INDEX] == str(orig)


def test_run_sh_fails_for_an_index_without_item(tmp_path: Path) -> None:
    script = install(tmp_path, it.items_configmaps(RUN, "ifu", ["a"], last_step="main"))
    out = subprocess.run(["/bin/sh", str(script), "main", "--", "/usr/bin/env"],
                         env={"JOB_COMPLETION_INDEX": "5", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "no item for completion index 5" in out.stderr


def test_run_sh_prefers_the_runner_step_binary() -> None:
    # The runner's binary is tried first; the argv is passed through untouched.
    assert f'exec {names.STEP_BINARY} "$step" "$@"' in it.RUN_SH
    assert 'else exec "$@"; fi' in it.RUN_SH
