"""A PipelineRun and its VirtualCluster as a simulation on Karpenter's KWOK provider. Pure.

What stays: the pools (classes, families, `like`, capacity, limits), so Karpenter makes
its real packing and pricing decisions over its EC2 catalog; every stage's item count,
batch, dependsOn, retries, tolerance, parallelism and CPU/memory requests; launch
pacing. What changes: time runs `scale` times faster (task durations, pacing, node
boot and consolidation, deadlines); each stage's pod is a placeholder that KWOK ends
after a duration drawn from the model; data movement goes (inputs, outputs, storage,
archive), and item sources the simulation cannot read (fromS3, fromFile) become a range
of the model's `items` count. A variant changes the VirtualCluster's pools and the
run's spec before that (`patch_pools`, `patch_stages`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.api import names
from nightshift.simulate.model import Model, ModelError, annotation

SIM_SECONDS = f"{names.GROUP}/sim-seconds"
SIM_SEED = f"{names.GROUP}/sim-seed"
KWOK_WEIGHT = "pod-complete.stage.kwok.x-k8s.io/weight"
# KWOK's own create and ready stages wait 1-5 s each by default: in compressed time that
# would be hours a task. A real pod's start (image cached) is seconds of a modelled
# hour, so the simulation makes them immediate.
INSTANT_STAGES = {f"{s}.stage.kwok.x-k8s.io/{k}": "0s" for s in ("pod-create", "pod-ready")
                  for k in ("delay", "jitter-delay")}
LABEL_SIMULATION = f"{names.GROUP}/simulation"
IMAGE = "busybox:1.36"
KEPT_STAGE_FIELDS = ("name", "dependsOn", "forEach", "batch", "parallelism", "retries",
                     "tolerateFailedItems", "pool", "mpi", "image", "steps")
# Resources a KWOK node has; others (ephemeral-storage: KWOK's instance types carry no
# instance-store disks) would leave the pod unschedulable.
KEPT_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
DEFAULT_CONSOLIDATE_AFTER = 120.0


class SimulationError(ValueError):
    """Manifests that cannot be simulated: says which and how to fix it."""


def merge(base: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386): mappings merge, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def patch_named(items: Sequence[Mapping[str, Any]], patches: Mapping[str, Any],
                where: str) -> list[dict[str, Any]]:
    """Merge `patches[name]` (and `patches["*"]`, first) into the list entry of that name."""
    known = {str(i["name"]) for i in items}
    unknown = set(patches) - known - {"*"}
    if unknown:
        raise SimulationError(f"variant: {where}: no entry named {sorted(unknown)}; the "
                              f"names are {sorted(known)} (or \"*\" for all).")
    out = []
    for item in items:
        v = merge(item, patches.get("*") or {})
        out.append(merge(v, patches.get(str(item["name"])) or {}))
    return out


def _seconds(modelled: float, model: Model) -> str:
    return f"{max(0, round(model.real(modelled)))}s"


def _duration(text: str, where: str) -> float:
    total, num = 0.0, ""
    for ch in text:
        if ch.isdigit():
            num += ch
        elif ch in "smh" and num:
            total += int(num) * {"s": 1, "m": 60, "h": 3600}[ch]
            num = ""
        else:
            raise SimulationError(f"{where}: {text!r} is not a duration like 2m or 90s")
    return total


# What a variant changes (its key) and, inside that, the list it changes by entry name.
BY_NAME = {"virtualCluster": "pools", "pipelineRun": "stages"}


def patched_spec(doc: Mapping[str, Any], variant: Mapping[str, Any] | None,
                 key: str) -> dict[str, Any]:
    """`doc`'s spec as the variant's `key` part changes it: a merge patch, and its
    BY_NAME list entries patched by name."""
    spec = copy.deepcopy(dict(doc.get("spec") or {}))
    patch = dict((variant or {}).get(key) or {})
    listed = BY_NAME[key]
    by_name = patch.pop(listed, None) or {}
    spec = merge(spec, patch)
    spec[listed] = patch_named(spec.get(listed) or [], by_name, f"{key}.{listed}")
    return spec  # type: ignore[no-any-return]


def virtual_cluster(vc: Mapping[str, Any], model: Model, namespace: str,
                    variant: Mapping[str, Any] | None = None) -> dict[str, Any]:
    spec = patched_spec(vc, variant, "virtualCluster")
    spec["nodeClass"] = {"kwok": {"nodeRegistrationDelay":
                                  _seconds(model.boot_seconds, model)}}
    for i, pool in enumerate(spec["pools"]):
        after = str(pool.get("consolidateAfter", "2m"))
        if after != "Never":
            modelled = _duration(after, f"spec.pools[{i}].consolidateAfter")
            pool["consolidateAfter"] = _seconds(modelled, model)
        pool.pop("expireAfter", None)
    return {"apiVersion": vc.get("apiVersion", names.API_VERSION), "kind": "VirtualCluster",
            "metadata": {"name": vc["metadata"]["name"], "namespace": namespace,
                         "labels": {LABEL_SIMULATION: namespace}},
            "spec": spec}


def item_source(stage: Mapping[str, Any], model: Model, where: str) -> Any:
    fe = stage.get("forEach")
    if not isinstance(fe, Mapping) or not ({"fromS3", "fromFile"} & set(fe)):
        return copy.deepcopy(fe)
    name = str(stage["name"])
    if name not in model.items:
        kind = "fromS3" if "fromS3" in fe else "fromFile"
        raise SimulationError(f"{where}.forEach.{kind}: a simulation does not read item "
                              f"sources; give the item count in the durations file: "
                              f"`items: {{{name}: 400}}`.")
    return {"range": {"from": 0, "to": model.items[name] - 1}}


def stage(raw: Mapping[str, Any], index: int, model: Model) -> dict[str, Any]:
    where = f"spec.stages[{index}]"
    out = {k: copy.deepcopy(raw[k]) for k in KEPT_STAGE_FIELDS if k in raw}
    if "forEach" in raw:
        out["forEach"] = item_source(raw, model, where)
    try:
        seconds = model.pod_quantiles(str(raw["name"]), int(raw.get("batch", 1)))
    except ModelError as e:
        raise SimulationError(str(e)) from e
    out["podAnnotations"] = {SIM_SECONDS: annotation(seconds, model),
                             SIM_SEED: str(model.seed * 1000003 + index),
                             KWOK_WEIGHT: "0", **INSTANT_STAGES}
    requests = ((raw.get("resources") or {}).get("requests") or {})
    out["resources"] = {"requests": {k: v for k, v in requests.items()
                                     if k in KEPT_RESOURCES} or {"cpu": "100m"}}
    if "activeDeadlineSeconds" in raw:
        out["activeDeadlineSeconds"] = max(1, math.ceil(
            model.real(float(raw["activeDeadlineSeconds"]))))
    if "mpi" not in raw:  # an MPI stage keeps its one step: the launcher's program
        out["image"] = IMAGE
        out["imagePullPolicy"] = "IfNotPresent"
        out["steps"] = [{"name": "simulated", "command": ["true"]}]
    return out


def pipeline_run(run: Mapping[str, Any], model: Model, namespace: str,
                 variant: Mapping[str, Any] | None = None) -> dict[str, Any]:
    spec = patched_spec(run, variant, "pipelineRun")
    stages = spec["stages"]
    out: dict[str, Any] = {k: copy.deepcopy(spec[k]) for k in
                           ("virtualCluster", "parallelism") if k in spec}
    if not out.get("virtualCluster"):
        raise SimulationError("spec.virtualCluster: a simulation runs on a VirtualCluster's "
                              "pools; name one and give its manifest.")
    rate = (spec.get("launch") or {}).get("maxPodsPerMinute")
    if rate:
        out["launch"] = {"maxPodsPerMinute": max(1, math.ceil(float(rate) / model.scale))}
    out["stages"] = [stage(s, i, model) for i, s in enumerate(stages)]
    return {"apiVersion": run.get("apiVersion", names.API_VERSION), "kind": "PipelineRun",
            "metadata": {"name": run["metadata"]["name"], "namespace": namespace,
                         "labels": {LABEL_SIMULATION: namespace}},
            "spec": out}


def pick(docs: Sequence[Mapping[str, Any]], run_name: str | None
         ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run to simulate and its VirtualCluster, from the manifests given."""
    runs = [d for d in docs if d.get("kind") == "PipelineRun"
            and (run_name is None or d["metadata"]["name"] == run_name)]
    if len(runs) != 1:
        found = [d["metadata"]["name"] for d in docs if d.get("kind") == "PipelineRun"]
        raise SimulationError(f"the manifests hold PipelineRuns {found}: "
                              + ("name one with --run NAME." if found else
                                 "give the file or folder with the run's manifest."))
    vc_name = (runs[0].get("spec") or {}).get("virtualCluster")
    vcs = [d for d in docs if d.get("kind") == "VirtualCluster"
           and d["metadata"]["name"] == vc_name]
    if not vcs:
        raise SimulationError(f"the run names spec.virtualCluster {vc_name!r}, which is not "
                              "in the manifests given: add its file (its pools are what is "
                              "simulated).")
    return dict(runs[0]), dict(vcs[0])
