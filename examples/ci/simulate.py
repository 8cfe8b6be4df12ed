#!/usr/bin/env python3
"""Turn a collaboration's PipelineRuns into simulations that run on kind in seconds.

    python simulate.py MANIFEST_OR_DIR... [-o sim.yaml] [--items 3] [--seconds 2]

Each PipelineRun keeps its shape (stages, dependsOn, forEach kinds, retries,
tolerateFailedItems, parallelism) so that the operator plans and runs it as it would the
real one, but every pod is tiny: a busybox step that prints its item and sleeps, no
storage (S3 is not there on kind), no pool (unless --pool) or VirtualCluster (no
Karpenter), and at most
--items items per stage (fromS3 and fromConfigMap become ranges of that size). Other
kinds are left out. Needs PyYAML (installed with nightshift[validate]).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

IMAGE = "busybox:1.36"
# Pod-level fields of a stage the simulation keeps as they are.
KEPT_STAGE_FIELDS = ("name", "dependsOn", "parallelism", "retries", "tolerateFailedItems",
                     "activeDeadlineSeconds")
KEPT_SPEC_FIELDS = ("launch", "parallelism")


def bounded(for_each: dict[str, Any] | None, items: int) -> dict[str, Any] | None:
    """The same kind of item source, at most `items` long."""
    if not for_each:
        return for_each
    if "items" in for_each:
        return {"items": list(for_each["items"])[:items]}
    if "range" in for_each:
        r = dict(for_each["range"])
        step = int(r.get("step", 1))
        r["to"] = min(int(r["to"]), int(r["from"]) + (items - 1) * step)
        return {"range": r}
    return {"range": {"from": 0, "to": items - 1, "format": "sim-{:03d}"}}


def simulate_stage(stage: dict[str, Any], items: int, seconds: float, image: str,
                   pool: str | None = None,
                   annotations: dict[str, str] | None = None) -> dict[str, Any]:
    out = {k: copy.deepcopy(stage[k]) for k in KEPT_STAGE_FIELDS if k in stage}
    if pool:
        out["pool"] = pool
    if annotations:
        out["podAnnotations"] = dict(annotations)
    if "forEach" in stage:
        out["forEach"] = bounded(stage["forEach"], items)
        tolerate = out.get("tolerateFailedItems")
        if tolerate is not None:
            out["tolerateFailedItems"] = min(int(tolerate), items)
    out["image"] = image
    out["imagePullPolicy"] = "IfNotPresent"
    out["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"memory": "32Mi"}}
    script = (f'echo "simulated {stage["name"]} item=${{NIGHTSHIFT_ITEM:-none}}"; '
              f"sleep {seconds:g}")
    out["steps"] = [{"name": "simulated", "command": ["sh", "-c", script]}]
    return out


def simulate(run: dict[str, Any], items: int = 3, seconds: float = 2, image: str = IMAGE,
             pool: str | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta = run.get("metadata") or {}
    spec = run.get("spec") or {}
    out_spec = {k: copy.deepcopy(spec[k]) for k in KEPT_SPEC_FIELDS if k in spec}
    out_spec["stages"] = [simulate_stage(s, items, seconds, image, pool, annotations)
                          for s in spec.get("stages") or []]
    return {
        "apiVersion": run["apiVersion"],
        "kind": "PipelineRun",
        "metadata": {"name": meta["name"], "labels": {"nightshift-ci/simulated": "true"}},
        "spec": out_spec,
    }


def pipelineruns(paths: list[str]) -> Iterator[dict[str, Any]]:
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml")) \
            if p.is_dir() else [p]
    for f in files:
        for doc in yaml.safe_load_all(f.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "PipelineRun" and \
                    str(doc.get("apiVersion", "")).startswith("nightshift.io/"):
                yield doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="MANIFEST_OR_DIR")
    ap.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    ap.add_argument("--items", type=int, default=3, help="items per stage at most")
    ap.add_argument("--seconds", type=float, default=2, help="each pod's run time")
    ap.add_argument("--image", default=IMAGE)
    ap.add_argument("--pool", help="run every stage on this pool (nodes labeled "
                    "nightshift.io/pool=<pool>), e.g. KWOK nodes whose pods only pretend")
    ap.add_argument("--pod-annotation", action="append", default=[], metavar="KEY=VALUE",
                    help="annotate every pod (e.g. KWOK's pod-complete delay)")
    args = ap.parse_args(argv)
    annotations = dict(a.split("=", 1) for a in args.pod_annotation)
    sims = [simulate(r, args.items, args.seconds, args.image, args.pool, annotations)
            for r in pipelineruns(args.paths)]
    if not sims:
        print("simulate: no PipelineRun found", file=sys.stderr)
        return 1
    text = yaml.safe_dump_all(sims, sort_keys=False)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    print(f"simulate: {len(sims)} PipelineRun(s): "
          f"{' '.join(s['metadata']['name'] for s in sims)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
