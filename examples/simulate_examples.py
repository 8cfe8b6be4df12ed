#!/usr/bin/env python3
"""The seed examples (examples/<seed>/) as KWOK simulations that keep their shape.

    python examples/simulate_examples.py DIR [--endpoint URL --secret NAME] [-o sim.yaml]

Unlike examples/ci/simulate.py (at most 3 items a stage, for kind), a simulation here
keeps every stage's item source and count (items, range, matrix, fromS3, fromFile),
batch, dependsOn, retries, tolerateFailedItems, parallelism, launch pacing and MPI
layout; what goes is what KWOK pods cannot do:
- steps become one busybox step (an MPI stage keeps its one step: it is the launcher's
  program); KWOK ends each pod after `sim.yaml`'s secondsPerItem x scale x batch seconds;
- inputs, outputs, mounts and the archive go (KWOK runs no runner, so a pod with the
  runner's init containers never completes), and with them `gather` inputs: the
  dependsOn that a gather requires stays;
- storage entries stay only where an item source reads them (fromS3, fromFile), pointed
  at the simulation's S3 server (a bucket per entry, the entry's or its SharedStorage's
  prefix kept); the items those sources read are written there first (sim.yaml `files`
  and `objects`);
- each pool becomes a static KWOK node pool named by `pool_map`; the VirtualCluster and
  SharedStorages are not applied (`nightshift validate` checks them).

sim.yaml beside the manifests: `scale`, `secondsPerItem: {stage: s}`, optional
`maxPodsPerMinute` (replaces launch pacing too slow for a test) and `parallelism:
{stage: n}` (set as spec.parallelism, the run-time knob, for a stage whose pods one
after the other would take minutes on KWOK), `files` / `objects`
(what item sources read) and `expect: {run: {stage: items}}`, counted by hand.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SIM_FILE = "sim.yaml"
IMAGE = "busybox:1.36"
KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
# Kept as written: what the operator plans with.
KEPT_STAGE_FIELDS = ("name", "dependsOn", "forEach", "batch", "parallelism", "retries",
                     "tolerateFailedItems", "activeDeadlineSeconds", "mpi")
MAX_DELAY = 30.0


@dataclass
class Example:
    name: str
    path: Path
    runs: list[dict[str, Any]] = field(default_factory=list)
    storages: dict[str, dict[str, Any]] = field(default_factory=dict)
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    sim: dict[str, Any] = field(default_factory=dict)

    @property
    def manifests(self) -> list[Path]:
        return sorted(p for p in self.path.glob("*.yaml") if p.name != SIM_FILE)


@dataclass(frozen=True)
class S3Target:
    """Where the simulation's item sources read: an S3 server and its credentials."""
    endpoint: str
    secret: str
    region: str = "us-east-1"

    @staticmethod
    def bucket(storage: str) -> str:
        return f"sim-{storage}"


def example_dirs(root: Path = HERE) -> list[Path]:
    return sorted(p.parent for p in root.glob(f"*/{SIM_FILE}"))


def load(path: Path) -> Example:
    ex = Example(path.name, path)
    for f in ex.manifests:
        for doc in yaml.safe_load_all(f.read_text(encoding="utf-8")):
            if not isinstance(doc, dict):
                continue
            kind, name = doc.get("kind"), str((doc.get("metadata") or {}).get("name"))
            if kind == "PipelineRun":
                ex.runs.append(doc)
            elif kind == "SharedStorage":
                ex.storages[name] = doc
            elif kind == "VirtualCluster":
                ex.clusters[name] = doc
    ex.sim = yaml.safe_load((path / SIM_FILE).read_text(encoding="utf-8")) or {}
    return ex


def expand(source: Mapping[str, Any]) -> list[str]:
    """The values of a sim.yaml list: {items: [...]} or {range: {from, to, step, format}}."""
    if "items" in source:
        return [str(v) for v in source["items"]]
    r = source["range"]
    return [str(r.get("format", "{}")).format(i)
            for i in range(int(r["from"]), int(r["to"]) + 1, int(r.get("step", 1)))]


def default_pool(ex: Example, run: Mapping[str, Any]) -> str:
    """A stage without `pool` runs on its VirtualCluster's first pool."""
    vc = ex.clusters.get(str(run["spec"].get("virtualCluster")))
    return str(vc["spec"]["pools"][0]["name"]) if vc else "default"


def pools(ex: Example) -> list[str]:
    out = {str(s.get("pool") or default_pool(ex, r)) for r in ex.runs
           for s in r["spec"]["stages"]}
    return sorted(out)


def s3_prefix(ex: Example, entry: Mapping[str, Any]) -> str:
    if "s3" in entry:
        return str(entry["s3"].get("prefix", ""))
    shared = ex.storages.get(str(entry.get("sharedStorage")))
    if not shared or shared["spec"].get("type") != "s3":
        raise ValueError(f"{ex.name}: storage {entry['name']} feeds an item source but is "
                         "not an S3 storage")
    return str(shared["spec"]["s3"].get("prefix", ""))


def item_storages(run: Mapping[str, Any]) -> set[str]:
    out = set()
    for s in run["spec"]["stages"]:
        fe = s.get("forEach") or {}
        for kind in ("fromS3", "fromFile"):
            if kind in fe:
                out.add(str(fe[kind]["storage"]))
    return out


def delay_seconds(ex: Example, stage: Mapping[str, Any]) -> float:
    per_item = float(ex.sim.get("secondsPerItem", {}).get(stage["name"], 1))
    seconds = per_item * float(ex.sim.get("scale", 1)) * int(stage.get("batch", 1))
    return round(min(MAX_DELAY, max(1.0, seconds)), 1)


def simulate_stage(ex: Example, run: Mapping[str, Any], stage: Mapping[str, Any],
                   pool_map: Mapping[str, str]) -> dict[str, Any]:
    out = {k: copy.deepcopy(stage[k]) for k in KEPT_STAGE_FIELDS if k in stage}
    out["pool"] = pool_map[str(stage.get("pool") or default_pool(ex, run))]
    out["podAnnotations"] = {KWOK_DELAY: f"{delay_seconds(ex, stage):g}s"}
    out["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
    if "mpi" in stage:
        out["image"] = stage["image"]
        out["steps"] = copy.deepcopy(stage["steps"])
        return out
    out["image"] = IMAGE
    out["imagePullPolicy"] = "IfNotPresent"
    out["steps"] = [{"name": "simulated", "command": [
        "sh", "-c", f'echo "simulated {stage["name"]} item=$NIGHTSHIFT_ITEM"']}]
    return out


def simulate_run(ex: Example, run: Mapping[str, Any], pool_map: Mapping[str, str],
                 s3: S3Target | None = None) -> dict[str, Any]:
    spec = run["spec"]
    out_spec: dict[str, Any] = {k: copy.deepcopy(spec[k]) for k in ("launch", "parallelism")
                                if k in spec}
    if "maxPodsPerMinute" in ex.sim:
        out_spec["launch"] = {**out_spec.get("launch", {}),
                              "maxPodsPerMinute": int(ex.sim["maxPodsPerMinute"])}
    if "parallelism" in ex.sim:
        # The operations knob (spec.parallelism), not the stage's own value: the stage
        # stays as written, only this run of it goes wider.
        out_spec["parallelism"] = {**out_spec.get("parallelism", {}),
                                   **{k: int(v) for k, v in ex.sim["parallelism"].items()}}
    needed = item_storages(run)
    if needed:
        if s3 is None:
            raise ValueError(f"{ex.name}: {sorted(needed)} feed item sources: give an "
                             "S3Target")
        out_spec["storage"] = [
            {"name": e["name"], "s3": {
                "bucket": s3.bucket(e["name"]), "prefix": s3_prefix(ex, e),
                "endpoint": s3.endpoint, "region": s3.region, "credentialsSecret": s3.secret}}
            for e in spec.get("storage", []) if e["name"] in needed]
    out_spec["stages"] = [simulate_stage(ex, run, s, pool_map) for s in spec["stages"]]
    return {"apiVersion": run["apiVersion"], "kind": "PipelineRun",
            "metadata": {"name": run["metadata"]["name"],
                         "labels": {"nightshift.io/example": ex.name}},
            "spec": out_spec}


def seed_objects(ex: Example, run: Mapping[str, Any]) -> list[tuple[str, str, bytes]]:
    """(storage entry, key in its bucket, body) of every object the simulated run's item
    sources read, from sim.yaml's `files` (one item a line) and `objects` (one item a
    key for fromS3)."""
    entries = {e["name"]: e for e in run["spec"].get("storage", [])}
    out: list[tuple[str, str, bytes]] = []
    for f in ex.sim.get("files", []):
        if f["storage"] in entries:
            body = "".join(f"{line}\n" for line in expand(f["lines"])).encode()
            out.append((f["storage"], s3_prefix(ex, entries[f["storage"]]) + f["path"], body))
    for o in ex.sim.get("objects", []):
        if o["storage"] in entries:
            prefix = s3_prefix(ex, entries[o["storage"]])
            out += [(o["storage"], prefix + key, b"x") for key in expand(o["keys"])]
    return out


def count_items(ex: Example, run: Mapping[str, Any], stage: Mapping[str, Any]) -> int:
    """A stage's item count worked out from the manifest and the simulation's seeded
    objects, as the operator will resolve it."""
    fe = stage.get("forEach")
    if not fe or "mpi" in stage:
        return 1
    if "items" in fe or "range" in fe:
        return len(expand(fe))
    if "matrix" in fe:
        return len(list(itertools.product(*fe["matrix"].values())))
    if "fromFile" in fe:
        src = fe["fromFile"]
        files = [f for f in ex.sim.get("files", []) if f["storage"] == src["storage"]
                 and f["path"] == src["path"]]
        return sum(1 for f in files for line in expand(f["lines"]) if line.strip())
    if "fromS3" in fe:
        src = fe["fromS3"]
        prefix, suffix = str(src.get("prefix", "")), str(src.get("suffix", ""))
        keys = [k for o in ex.sim.get("objects", []) if o["storage"] == src["storage"]
                for k in expand(o["keys"])]
        return sum(1 for k in keys if k.startswith(prefix) and k.endswith(suffix))
    raise ValueError(f"{ex.name}: stage {stage['name']}: no item source the simulation "
                     f"can count: {sorted(fe)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("example", type=Path, help="an examples/<seed> folder")
    ap.add_argument("-o", "--output", default="-")
    ap.add_argument("--endpoint", default="http://127.0.0.1:7070",
                    help="S3 endpoint item sources read in the simulation")
    ap.add_argument("--secret", default="sim-s3", help="Secret with its credentials")
    ap.add_argument("--pool-prefix", default="sim-",
                    help="pool names become <prefix><pool> (static KWOK node pools)")
    args = ap.parse_args(argv)
    ex = load(args.example)
    pool_map = {p: f"{args.pool_prefix}{p}" for p in pools(ex)}
    s3 = S3Target(args.endpoint, args.secret)
    text = yaml.safe_dump_all([simulate_run(ex, r, pool_map, s3) for r in ex.runs],
                              sort_keys=False)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
