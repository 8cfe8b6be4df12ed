"""The runner's view of its pod: the config (schema in api/runnerwire.py), its paths, its item.

The JSON (names.ENV_RUNNER_CONFIG) carries only what the operator knows at render time:
resolved storages and the input/output *templates*. The item itself is resolved here, at
run time, so one pod template serves every index of the Indexed Job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nightshift.api import names
from nightshift.api.itemfields import FieldsError, expand, parse_fields
from nightshift.api.itemlookup import DirVolume, Item, lookup, with_fields
from nightshift.api.runnerwire import (
    ConfigError,
    DataConfig,
    RunnerConfig,
    StorageConfig,
    gather_dir,
)

# The wire types come from api/runnerwire.py; the runner's modules import them here.
__all__ = ["ENV_ROOT", "ConfigError", "DataConfig", "Item", "Paths", "RunnerConfig",
           "StorageConfig", "as_prefix", "fill_template", "load", "output_path", "paths_from_env",
           "resolve_item"]

# Test and local-run override for the /nightshift tree (the pod's volume layout); the
# operator never sets it.
ENV_ROOT = "NIGHTSHIFT_ROOT"


def _under(root: Path, mount: str) -> Path:
    return root / Path(mount).relative_to(names.MOUNT_ROOT)


@dataclass(frozen=True)
class Paths:
    """The pod's /nightshift tree (see nightshift.api.names), relocatable for tests."""

    root: Path

    @property
    def work(self) -> Path:
        return _under(self.root, names.MOUNT_WORK)

    @property
    def bin(self) -> Path:
        return _under(self.root, names.MOUNT_BIN)

    @property
    def cache(self) -> Path:
        return _under(self.root, names.MOUNT_CACHE)

    @property
    def items_file(self) -> Path:
        return _under(self.root, names.ITEMS_FILE)

    def gather(self, stage: str) -> Path:
        """The items volume of a stage an input gathers over."""
        return _under(self.root, gather_dir(stage))

    @property
    def inputs(self) -> Path:
        return _under(self.root, names.MOUNT_INPUTS)

    @property
    def outputs(self) -> Path:
        return _under(self.root, names.MOUNT_OUTPUTS)

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


def load(env: dict[str, str] | None = None) -> RunnerConfig:
    env = dict(os.environ) if env is None else env
    text = env.get(names.ENV_RUNNER_CONFIG)
    if not text:
        raise ConfigError(f"{names.ENV_RUNNER_CONFIG} is not set: this container must be "
                          "rendered by Nightshift")
    return RunnerConfig.loads(text)


def resolve_item(paths: Paths, env: dict[str, str] | None = None) -> Item:
    """The item of this pod: NIGHTSHIFT_ITEM when set, else itemlookup.lookup, as run.sh."""
    env = dict(os.environ) if env is None else env
    ci_text = env.get(names.ENV_COMPLETION_INDEX, "")
    ci = int(ci_text) if ci_text.isdigit() else 0
    try:
        fields = parse_fields(env.get(names.ENV_ITEM_FIELDS, ""))
    except FieldsError as e:
        raise ConfigError(str(e)) from None
    if names.ENV_ITEM in env:
        idx_text = env.get(names.ENV_ITEM_INDEX, "")
        return with_fields(Item(env[names.ENV_ITEM],
                                int(idx_text) if idx_text.isdigit() else ci, ci), fields)
    items_file = Path(env.get(names.ENV_ITEMS_FILE) or paths.items_file)
    if not ci_text.isdigit():
        raise ConfigError(
            f"neither {names.ENV_ITEM} nor {names.ENV_COMPLETION_INDEX} is set: "
            "the runner only runs in pods of an Indexed Job"
        )
    if not items_file.exists():
        raise ConfigError(
            f"items file {items_file} is missing: mount the stage's items ConfigMap at "
            f"{names.MOUNT_ITEMS} in the runner containers"
        )
    return lookup(DirVolume(items_file.parent), ci, base=items_file.name, fields=fields)


def fill_template(template: str, cfg: RunnerConfig, item: Item,
                  gather: str | None = None) -> str:
    """{item}, {index}, {run}, {stage}, each matrix {<field>} and, for a gathering input,
    {gather}: one left-to-right pass (itemfields.expand), never str.format, so items
    and paths may hold braces and a value is never expanded twice."""
    values = {**dict(item.fields), "item": item.value, "index": str(item.index),
              "run": cfg.run, "stage": cfg.stage}
    if gather is not None:
        values["gather"] = gather
    return expand(template, values)


def as_prefix(path: str) -> str:
    return path if not path or path.endswith("/") else path + "/"


def output_path(ref: DataConfig, cfg: RunnerConfig, item: Item) -> str:
    """The item's prefix for an output, relative to its storage's: where the commit
    writes, and what stage-in compares an input with to know the item reads its own."""
    return as_prefix(fill_template(ref.path, cfg, item))
