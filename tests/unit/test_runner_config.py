"""Runner config parsing (the runnerwire schema), item resolution and template expansion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightshift.api import names
from nightshift.api.itemlookup import Item
from nightshift.api.runnerwire import ConfigError, RunnerConfig
from nightshift.runner import config

BASE = {
    "version": 1, "run": "r", "namespace": "ns", "stage": "s",
    "storages": {"raw": {"kind": "s3", "bucket": "b", "prefix": "p/", "endpoint": "http://x"},
                 "nfs": {"kind": "dir", "path": "/nightshift/storage/nfs"}},
    "inputs": [{"storage": "raw", "path": "in/{item}/"}],
    "outputs": [{"storage": "nfs", "path": "out/{item}/", "mode": "interleave"}],
    "archive": {"storage": "raw", "prefix": "_ns"},
}


def test_parse_defaults_and_modes() -> None:
    cfg = RunnerConfig.loads(json.dumps(BASE))
    assert cfg.inputs[0].mode == "stage" and cfg.inputs[0].cache
    assert cfg.outputs[0].mode == "interleave" and cfg.outputs[0].failed_prefix == "failed/"
    assert cfg.storage("raw").endpoint == "http://x"
    assert cfg.archive is not None and cfg.archive.prefix == "_ns"


@pytest.mark.parametrize(("patch", "message"), [
    ({"version": 2}, "version"),
    ({"inputs": [{"storage": "nope", "path": "x"}]}, "storage 'nope'"),
    ({"outputs": [{"storage": "raw", "path": "x", "mode": "stream"}]}, "outputs[0].mode"),
    ({"storages": {"raw": {"kind": "s3"}}}, "bucket"),
    ({"storages": {"raw": {"kind": "nfs"}}}, "storages.raw.kind"),
    ({"inputs": [{"storage": "raw"}]}, "inputs[0].path"),
    ({"outputs": ["out/"]}, "outputs[0] must be an object"),
    ({"archive": {"prefix": "x"}}, "archive.storage"),
])
def test_parse_errors_name_the_setting(patch: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        RunnerConfig.loads(json.dumps(BASE | patch))


def test_load_needs_the_env_var() -> None:
    with pytest.raises(ConfigError, match=f"{names.ENV_RUNNER_CONFIG} is not set"):
        config.load({})
    with pytest.raises(ConfigError, match="is not JSON"):
        config.load({names.ENV_RUNNER_CONFIG: "{"})
    assert config.load({names.ENV_RUNNER_CONFIG: json.dumps(BASE)}).stage == "s"


def test_json_round_trip_keeps_every_field() -> None:
    cfg = RunnerConfig.loads(json.dumps(BASE | {"cacheMaxBytes": 123, "cleanWork": True}))
    again = RunnerConfig.loads(cfg.dumps())
    assert again == cfg and again.cache_max_bytes == 123 and again.clean_work
    # The default stays out of the JSON, so rendered pod templates do not change.
    assert "cacheMaxBytes" not in RunnerConfig.loads(json.dumps(BASE)).to_json()


def test_required_outputs_round_trip_and_stay_out_of_the_json_when_unset() -> None:
    outputs = [{"storage": "nfs", "path": "cat/{item}/", "required": True}]
    cfg = RunnerConfig.loads(json.dumps(BASE | {"outputs": outputs}))
    assert cfg.outputs[0].required and RunnerConfig.loads(cfg.dumps()) == cfg
    assert cfg.to_json()["outputs"][0]["required"] is True
    plain = RunnerConfig.loads(json.dumps(BASE))
    assert not plain.outputs[0].required and "required" not in plain.to_json()["outputs"][0]


def test_item_from_env_wins() -> None:
    paths = config.Paths(Path("/nonexistent"))
    item = config.resolve_item(paths, {"NIGHTSHIFT_ITEM": "a b", "NIGHTSHIFT_ITEM_INDEX": "7",
                                       "JOB_COMPLETION_INDEX": "2"})
    assert item == Item("a b", 7, 2)


def test_item_from_items_file(tmp_path: Path) -> None:
    (tmp_path / "items").mkdir()
    (tmp_path / "items" / "items").write_text("n-1\nn-2\nn-{3}\n")
    paths = config.Paths(tmp_path)
    assert config.resolve_item(paths, {"JOB_COMPLETION_INDEX": "1"}) == Item("n-2", 1, 1)
    with pytest.raises(ConfigError, match="no line 3"):
        config.resolve_item(paths, {"JOB_COMPLETION_INDEX": "3"})
    # A rerun Job maps its completion indexes to the items' original ones.
    (tmp_path / "items" / "indexes").write_text("2\n0\n")
    assert config.resolve_item(paths, {"JOB_COMPLETION_INDEX": "0"}) == Item("n-{3}", 2, 0)
    assert config.resolve_item(paths, {"JOB_COMPLETION_INDEX": "1"}) == Item("n-1", 0, 1)


def test_expand_is_plain_substitution() -> None:
    cfg = RunnerConfig.loads(json.dumps(BASE))
    item = Item("x{0}y", 4, 4)
    assert config.fill_template("{run}/{stage}/{item}/{index}/{other}", cfg, item) == \
        "r/s/x{0}y/4/{other}"
    assert config.as_prefix("a") == "a/" and config.as_prefix("a/") == "a/"
