"""The runner's configuration: one JSON env var rendered by pipelinerun/runnerparts.py, plus the pod.

The JSON (NIGHTSHIFT_RUNNER_CONFIG) carries only what the operator knows at render time:
resolved storages and the input/output *templates*. The item itself is resolved here, at
run time, so one pod template serves every index of the Indexed Job.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightshift.api import names

ENV_CONFIG = "NIGHTSHIFT_RUNNER_CONFIG"
# Test and local-run override for the /nightshift tree (the pod's volume layout).
ENV_ROOT = "NIGHTSHIFT_ROOT"
ENV_POD_NAME = "NIGHTSHIFT_POD_NAME"
ENV_POD_UID = "NIGHTSHIFT_POD_UID"
ENV_NODE_NAME = "NODE_NAME"
ENV_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
# The retry Jobs' map from completion index to original index (see pipelinerun/items.py).
INDEXES_KEY = "indexes"
ENV_LAST_STEP = "NIGHTSHIFT_LAST_STEP"

CONFIG_VERSION = 1
DEFAULT_CACHE_BYTES = 50 * 2**30


class ConfigError(ValueError):
    """The runner cannot start: the message says which setting and how to fix it."""


@dataclass(frozen=True)
class StorageConfig:
    name: str
    kind: str  # "s3" | "dir" (a PVC mounted into the runner containers)
    bucket: str = ""
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    # Names of env vars holding the keys (secretKeyRef); None: the default AWS chain
    # (IRSA / Pod Identity on EKS).
    access_key_env: str | None = None
    secret_key_env: str | None = None
    path: str = ""  # kind "dir": where the volume is mounted


@dataclass(frozen=True)
class DataConfig:
    storage: str
    path: str
    mode: str
    cache: bool = True
    local_path: str = ""
    failed_prefix: str = "failed/"


@dataclass(frozen=True)
class ArchiveConfig:
    storage: str
    prefix: str


@dataclass(frozen=True)
class RunnerConfig:
    run: str
    namespace: str
    stage: str
    storages: dict[str, StorageConfig]
    inputs: list[DataConfig] = field(default_factory=list)
    outputs: list[DataConfig] = field(default_factory=list)
    archive: ArchiveConfig | None = None
    cache_max_bytes: int = DEFAULT_CACHE_BYTES
    # hostPath scratch outlives the pod; the sidecar removes it when done.
    clean_work: bool = False

    def storage(self, name: str) -> StorageConfig:
        try:
            return self.storages[name]
        except KeyError:
            raise ConfigError(
                f"{ENV_CONFIG}: storage {name!r} is not defined; "
                f"known: {sorted(self.storages)}"
            ) from None


@dataclass(frozen=True)
class Paths:
    """The pod's /nightshift tree (see nightshift.api.names), relocatable for tests."""

    root: Path

    @property
    def work(self) -> Path:
        return self.root / Path(names.MOUNT_WORK).relative_to(names.MOUNT_ROOT)

    @property
    def bin(self) -> Path:
        return self.root / Path(names.MOUNT_BIN).relative_to(names.MOUNT_ROOT)

    @property
    def cache(self) -> Path:
        return self.root / Path(names.MOUNT_CACHE).relative_to(names.MOUNT_ROOT)

    @property
    def items_file(self) -> Path:
        return self.root / Path(names.MOUNT_ITEMS).relative_to(names.MOUNT_ROOT) / names.ITEMS_KEY

    @property
    def inputs(self) -> Path:
        return self.work / "inputs"

    @property
    def outputs(self) -> Path:
        return self.work / "outputs"

    @property
    def tmp(self) -> Path:
        return self.work / "tmp"

    @property
    def state(self) -> Path:
        """Hand-off between the runner containers and the step script."""
        return self.work / ".nightshift"


def paths_from_env(env: dict[str, str] | None = None) -> Paths:
    env = dict(os.environ) if env is None else env
    return Paths(Path(env.get(ENV_ROOT) or names.MOUNT_ROOT))


def _storage(name: str, raw: dict[str, Any]) -> StorageConfig:
    kind = raw.get("kind")
    if kind not in ("s3", "dir"):
        raise ConfigError(f"{ENV_CONFIG}: storages.{name}.kind must be s3 or dir, got {kind!r}")
    if kind == "s3" and not raw.get("bucket"):
        raise ConfigError(f"{ENV_CONFIG}: storages.{name}.bucket is empty")
    return StorageConfig(
        name=name,
        kind=kind,
        bucket=raw.get("bucket", ""),
        prefix=raw.get("prefix", ""),
        endpoint=raw.get("endpoint"),
        region=raw.get("region"),
        access_key_env=raw.get("accessKeyEnv"),
        secret_key_env=raw.get("secretKeyEnv"),
        path=raw.get("path", ""),
    )


def _data(raw: dict[str, Any], default_mode: str) -> DataConfig:
    return DataConfig(
        storage=raw["storage"],
        path=raw["path"],
        mode=raw.get("mode") or default_mode,
        cache=bool(raw.get("cache", True)),
        local_path=raw.get("localPath", ""),
        failed_prefix=raw.get("failedPrefix", "failed/"),
    )


def parse(text: str) -> RunnerConfig:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{ENV_CONFIG} is not JSON: {e}") from None
    if not isinstance(raw, dict) or raw.get("version") != CONFIG_VERSION:
        raise ConfigError(
            f"{ENV_CONFIG}: version must be {CONFIG_VERSION}; the runner image and the "
            "operator disagree, use the runner image released with the operator"
        )
    storages = {n: _storage(n, s) for n, s in (raw.get("storages") or {}).items()}
    archive = raw.get("archive")
    cfg = RunnerConfig(
        run=raw.get("run", ""),
        namespace=raw.get("namespace", ""),
        stage=raw.get("stage", ""),
        storages=storages,
        inputs=[_data(d, "stage") for d in raw.get("inputs") or []],
        outputs=[_data(d, "batch") for d in raw.get("outputs") or []],
        archive=ArchiveConfig(archive["storage"], archive.get("prefix", "_nightshift"))
        if archive
        else None,
        cache_max_bytes=int(raw.get("cacheMaxBytes", DEFAULT_CACHE_BYTES)),
        clean_work=bool(raw.get("cleanWork", False)),
    )
    for where, refs in (("inputs", cfg.inputs), ("outputs", cfg.outputs)):
        for i, ref in enumerate(refs):
            cfg.storage(ref.storage)
            allowed = ("stage", "stream") if where == "inputs" else ("batch", "interleave")
            if ref.mode not in allowed:
                raise ConfigError(f"{ENV_CONFIG}: {where}[{i}].mode {ref.mode!r} not in {allowed}")
    if cfg.archive:
        cfg.storage(cfg.archive.storage)
    return cfg


def load(env: dict[str, str] | None = None) -> RunnerConfig:
    env = dict(os.environ) if env is None else env
    text = env.get(ENV_CONFIG)
    if not text:
        raise ConfigError(f"{ENV_CONFIG} is not set: this container must be rendered by Nightshift")
    return parse(text)


@dataclass(frozen=True)
class Item:
    value: str
    index: int  # the item's index in the stage's full list (stable across reruns)
    completion_index: int


def resolve_item(paths: Paths, env: dict[str, str] | None = None) -> Item:
    """The item of this pod: NIGHTSHIFT_ITEM when set, else looked up like run.sh does.

    The items volume holds the stage's list in chunks (`items`, `items.<start>`, ...)
    and, for a Job that reruns failed items, `indexes[.<start>]`: the original index of
    each completion index. Keeping the original index keeps each item's task record and
    output keys stable across reruns.
    """
    env = dict(os.environ) if env is None else env
    ci_text = env.get(ENV_COMPLETION_INDEX, "")
    ci = int(ci_text) if ci_text.isdigit() else 0
    if names.ENV_ITEM in env:
        idx_text = env.get(names.ENV_ITEM_INDEX, "")
        return Item(env[names.ENV_ITEM], int(idx_text) if idx_text.isdigit() else ci, ci)
    items_file = Path(env.get(names.ENV_ITEMS_FILE) or paths.items_file)
    if not ci_text.isdigit():
        raise ConfigError(
            f"neither {names.ENV_ITEM} nor {ENV_COMPLETION_INDEX} is set: "
            "the runner only runs in pods of an Indexed Job"
        )
    folder = items_file.parent
    if not items_file.exists():
        raise ConfigError(
            f"items file {items_file} is missing: mount the stage's items ConfigMap at "
            f"{names.MOUNT_ITEMS} in the runner containers"
        )
    orig = ci
    if (folder / INDEXES_KEY).exists():
        text = nth_line(folder, INDEXES_KEY, ci)
        if text is None or not text.strip().isdigit():
            raise ConfigError(f"{folder}/{INDEXES_KEY} has no index for completion {ci}")
        orig = int(text)
    value = nth_line(folder, items_file.name, orig)
    if value is None:
        raise ConfigError(f"items in {folder} have no line {orig} (completion index {ci})")
    return Item(value, orig, ci)


def nth_line(folder: Path, base: str, n: int) -> str | None:
    """Line n (0-based) of a list kept in `base`, `base.<start>`, ... chunk files."""
    file, start = folder / base, 0
    for f in sorted(folder.glob(f"{base}.*")):
        suffix = f.name[len(base) + 1:]
        if suffix.isdigit() and int(suffix) <= n and int(suffix) >= start:
            file, start = f, int(suffix)
    with file.open(encoding="utf-8") as fh:
        for i, raw in enumerate(fh):
            if i == n - start:
                return raw.rstrip("\n")
    return None


def expand(template: str, cfg: RunnerConfig, item: Item) -> str:
    """Plain substitution, never str.format: items and paths may hold braces."""
    return (
        template.replace("{item}", item.value)
        .replace("{index}", str(item.index))
        .replace("{run}", cfg.run)
        .replace("{stage}", cfg.stage)
    )


def as_prefix(path: str) -> str:
    return path if not path or path.endswith("/") else path + "/"
