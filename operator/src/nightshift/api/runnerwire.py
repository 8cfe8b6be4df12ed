"""The operator↔runner wire: the config JSON's schema.

Both sides import this module: the operator renders with it (pipelinerun/runnerparts.py,
pipelinerun/items.py), the runner image parses with it (nightshift.runner). The runner
image installs the package without dependencies, so this module is stdlib only.

The strings of the wire live in api/names.py, one definition each:
  env      ENV_RUNNER_CONFIG (the JSON below), ENV_POD_NAME, ENV_POD_UID, ENV_NODE_NAME,
           ENV_COMPLETION_INDEX (set by the Job controller), ENV_LAST_STEP, ENV_ITEM,
           ENV_ITEM_INDEX, ENV_ITEMS_FILE, ENV_ATTEMPT
  mounts   MOUNT_ROOT and the paths below it (MOUNT_ITEMS, MOUNT_WORK, MOUNT_BIN, ...)
  items    ITEMS_KEY, INDEXES_KEY, RUN_SH_KEY, STAGE_ENV_KEY (keys of the items volume)
           and the ANNOTATION_ITEM_* annotations on each chunk ConfigMap

The item-lookup rules (chunk keys, the items and indexes lists) are api/itemlookup.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nightshift.api import names

# Bump when a change would make an older runner misread the JSON; the runner refuses
# any other version rather than guess.
CONFIG_VERSION = 1
KIND_S3 = "s3"
KIND_DIR = "dir"  # a PVC mounted at MOUNT_STORAGE/<storage name>
INPUT_MODES = ("stage", "stream")
OUTPUT_MODES = ("batch", "interleave")
DEFAULT_CACHE_BYTES = 50 * 2**30
DEFAULT_FAILED_PREFIX = "failed/"
DEFAULT_ARCHIVE_PREFIX = "_nightshift"


_WHERE = names.ENV_RUNNER_CONFIG


class ConfigError(ValueError):
    """The runner cannot start: the message says which setting and how to fix it."""


def _obj(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{_WHERE}: {where} must be an object, got {type(raw).__name__}")
    return raw


def _str(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{_WHERE}: {where}.{key} must be a non-empty string")
    return value


@dataclass(frozen=True)
class StorageConfig:
    name: str
    kind: str  # KIND_S3 | KIND_DIR
    bucket: str = ""
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    # Names of env vars holding the keys (secretKeyRef); None: the default AWS chain
    # (IRSA / Pod Identity on EKS).
    access_key_env: str | None = None
    secret_key_env: str | None = None
    path: str = ""  # KIND_DIR: where the volume is mounted
    # KIND_DIR: the volume is a node's FUSE mount (a glusterfs SharedStorage), which
    # the runner checks is mounted before it stages anything.
    fuse: bool = False
    # KIND_DIR: the directories under `path` that are each a node's FUSE mount (a cvmfs
    # SharedStorage's repositories), checked the same way.
    fuse_dirs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.kind == KIND_DIR:
            # "fuse" and "fuseDirs" only when set: every other pod template stays
            # byte-identical.
            return {"kind": KIND_DIR, "path": self.path, **({"fuse": True} if self.fuse else {}),
                    **({"fuseDirs": list(self.fuse_dirs)} if self.fuse_dirs else {})}
        out: dict[str, Any] = {"kind": self.kind, "bucket": self.bucket, "prefix": self.prefix,
                               "endpoint": self.endpoint, "region": self.region}
        if self.access_key_env or self.secret_key_env:
            out |= {"accessKeyEnv": self.access_key_env, "secretKeyEnv": self.secret_key_env}
        return out

    @classmethod
    def from_json(cls, name: str, raw: Any) -> StorageConfig:
        where = f"storages.{name}"
        raw = _obj(raw, where)
        kind = raw.get("kind")
        if kind not in (KIND_S3, KIND_DIR):
            raise ConfigError(f"{_WHERE}: {where}.kind must be {KIND_S3} or {KIND_DIR}, "
                              f"got {kind!r}")
        if kind == KIND_S3 and not raw.get("bucket"):
            raise ConfigError(f"{_WHERE}: {where}.bucket is empty")
        return cls(name=name, kind=kind, bucket=raw.get("bucket", ""),
                   prefix=raw.get("prefix", ""), endpoint=raw.get("endpoint"),
                   region=raw.get("region"), access_key_env=raw.get("accessKeyEnv"),
                   secret_key_env=raw.get("secretKeyEnv"), path=raw.get("path", ""),
                   fuse=bool(raw.get("fuse")),
                   fuse_dirs=tuple(str(d) for d in raw.get("fuseDirs") or ()))


@dataclass(frozen=True)
class DataConfig:
    storage: str
    path: str
    mode: str
    cache: bool = True
    local_path: str = ""
    failed_prefix: str = DEFAULT_FAILED_PREFIX
    # inputs[].gather: the stage whose items the input repeats over ({gather} in path);
    # its items ConfigMaps are mounted at gather_dir(gather).
    gather: str = ""
    # outputs[].required: an item whose steps leave this output empty fails.
    required: bool = False
    # inputs[].optional: a path that matches no file stages nothing (else exit 66).
    optional: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"storage": self.storage, "path": self.path, "mode": self.mode,
                               "cache": self.cache, "localPath": self.local_path,
                               "failedPrefix": self.failed_prefix}
        # Only when set: every other pod template stays byte-identical (an older runner
        # ignores the key; the operator never renders it for one).
        if self.gather:
            out["gather"] = self.gather
        if self.required:
            out["required"] = True
        if self.optional:
            out["optional"] = True
        return out

    @classmethod
    def from_json(cls, raw: Any, default_mode: str, where: str) -> DataConfig:
        raw = _obj(raw, where)
        return cls(storage=_str(raw, "storage", where), path=_str(raw, "path", where),
                   mode=raw.get("mode") or default_mode, cache=bool(raw.get("cache", True)),
                   local_path=raw.get("localPath", ""),
                   failed_prefix=raw.get("failedPrefix", DEFAULT_FAILED_PREFIX),
                   gather=raw.get("gather") or "", required=bool(raw.get("required")),
                   optional=bool(raw.get("optional")))


def gather_dir(stage: str) -> str:
    """Where a pod that gathers `stage` finds that stage's items volume."""
    return f"{names.MOUNT_GATHER}/{stage}"


@dataclass(frozen=True)
class ArchiveConfig:
    storage: str
    prefix: str = DEFAULT_ARCHIVE_PREFIX

    def to_json(self) -> dict[str, Any]:
        return {"storage": self.storage, "prefix": self.prefix}

    @classmethod
    def from_json(cls, raw: Any) -> ArchiveConfig:
        raw = _obj(raw, "archive")
        return cls(_str(raw, "storage", "archive"), raw.get("prefix", DEFAULT_ARCHIVE_PREFIX))


@dataclass(frozen=True)
class RunnerConfig:
    """What the operator knows at render time: storages and input/output *templates*.

    The item is resolved in the pod (lookup), so one pod template serves every index.
    """

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
    # Whether the pod shares its PID namespace, so the sidecar can sample the steps'
    # processes in /proc (and see which output files they hold open).
    sample_processes: bool = True

    def storage(self, name: str) -> StorageConfig:
        try:
            return self.storages[name]
        except KeyError:
            raise ConfigError(f"{_WHERE}: storage {name!r} is not defined; "
                              f"known: {sorted(self.storages)}") from None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": CONFIG_VERSION, "run": self.run, "namespace": self.namespace,
            "stage": self.stage,
            "storages": {n: s.to_json() for n, s in self.storages.items()},
            "inputs": [d.to_json() for d in self.inputs],
            "outputs": [d.to_json() for d in self.outputs],
            "archive": self.archive.to_json() if self.archive else None,
            "cleanWork": self.clean_work,
        }
        # The operator never sets it; leaving the default out keeps every rendered pod
        # template byte-identical to those of earlier releases.
        if self.cache_max_bytes != DEFAULT_CACHE_BYTES:
            out["cacheMaxBytes"] = self.cache_max_bytes
        if not self.sample_processes:
            out["sampleProcesses"] = False
        return out

    def dumps(self) -> str:
        """The value of ENV_RUNNER_CONFIG (sorted keys: stable pod templates)."""
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, raw: Any) -> RunnerConfig:
        if not isinstance(raw, dict) or raw.get("version") != CONFIG_VERSION:
            raise ConfigError(
                f"{_WHERE}: version must be {CONFIG_VERSION}; the runner image and the "
                "operator disagree, use the runner image released with the operator")
        storages = {n: StorageConfig.from_json(n, s)
                    for n, s in _obj(raw.get("storages") or {}, "storages").items()}
        archive = raw.get("archive")
        cfg = cls(
            run=raw.get("run", ""), namespace=raw.get("namespace", ""),
            stage=raw.get("stage", ""), storages=storages,
            inputs=[DataConfig.from_json(d, INPUT_MODES[0], f"inputs[{i}]")
                    for i, d in enumerate(raw.get("inputs") or [])],
            outputs=[DataConfig.from_json(d, OUTPUT_MODES[0], f"outputs[{i}]")
                     for i, d in enumerate(raw.get("outputs") or [])],
            archive=ArchiveConfig.from_json(archive) if archive else None,
            cache_max_bytes=int(raw.get("cacheMaxBytes", DEFAULT_CACHE_BYTES)),
            clean_work=bool(raw.get("cleanWork", False)),
            sample_processes=bool(raw.get("sampleProcesses", True)),
        )
        for where, refs, allowed in (("inputs", cfg.inputs, INPUT_MODES),
                                     ("outputs", cfg.outputs, OUTPUT_MODES)):
            for i, ref in enumerate(refs):
                cfg.storage(ref.storage)
                if ref.mode not in allowed:
                    raise ConfigError(f"{_WHERE}: {where}[{i}].mode {ref.mode!r} not in {allowed}")
        if cfg.archive:
            cfg.storage(cfg.archive.storage)
        return cfg

    @classmethod
    def loads(cls, text: str) -> RunnerConfig:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{_WHERE} is not JSON: {e}") from None
        return cls.from_json(raw)
