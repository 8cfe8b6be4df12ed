"""A stage's items: expansion, frozen ConfigMap chunks, and the in-pod wrapper run.sh.

Items reach a container only through the mounted list and two env vars that run.sh
exports; nothing here ever builds a shell line out of an item.

Layout of the items volume (names.MOUNT_ITEMS), a projection of the stage's chunk
ConfigMaps, each contributing its own keys (the rules are api/itemlookup.py):
  items            items 0..k-1, one per line (the only file below ~900 KB)
  items.0050000    items from index 50000 on (zero-padded start index), and so on
  run.sh           the step wrapper (in the first chunk)
  stage.env        the stage's NIGHTSHIFT_* constants, run.sh exports them (first chunk)
  indexes[.NNN]    retry Jobs only: the original index of each completion index
"""

from __future__ import annotations

import hashlib
import itertools
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightshift.api import itemfields, itemlookup, names
from nightshift.api.itemfields import FIELD_SEP
from nightshift.api.itemlookup import chunk_key
from nightshift.pipelinerun import batch as batchmod
from nightshift.pipelinerun import fusewait
from nightshift.pipelinerun.spec import ForEach

# ConfigMaps are capped at 1 MiB including metadata; leave room for both.
CHUNK_BYTES = 900_000
MAX_ITEMS = 500_000
MAX_ITEM_BYTES = 1024
# Room for the "-<index>" suffix the Job controller appends to an Indexed pod's
# hostname: the whole must stay a 63-character DNS label up to index 999999.
JOB_NAME_MAX = 63 - len("-999999")

# Aliases of api/names.py for callers that still spell them here (pipelinerun/
# itemsource.py, tests); new code uses names.* directly.


@dataclass(frozen=True)
class RunRef:
    """What a rendered object needs to know about its PipelineRun."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, run: Mapping[str, Any]) -> RunRef:
        meta = run.get("metadata", {})
        return cls(name=meta.get("name", ""), namespace=meta.get("namespace", ""),
                   uid=meta.get("uid", ""))

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.PIPELINERUN,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def labels(self, stage: str, component: str) -> dict[str, str]:
        return {
            names.LABEL_RUN: self.name,
            names.LABEL_STAGE: stage,
            names.LABEL_NAME: "pipelinerun",
            names.LABEL_INSTANCE: self.name,
            names.LABEL_COMPONENT: component,
            names.LABEL_PART_OF: "nightshift",
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
        }


def object_name(parts: Sequence[str], limit: int = 63) -> str:
    """A DNS label from `parts`, always ending in a short hash of the parts.

    The hash is what keeps names unique: run "a-b" with stage "c" and run "a" with
    stage "b-c" would otherwise both give "a-b-c" and fight over one Job.
    """
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:6]
    readable = "-".join(parts).lower().replace(".", "-").replace("_", "-")
    readable = readable[: limit - len(digest) - 1].strip("-")
    return f"{readable}-{digest}" if readable else digest


# The labels a stage's pods carry, and all they carry of the run: what selects them
# (virtualcluster.observe lists pending pods by run; people select a run's, stage's or
# attempt's pods).
POD_LABELS = (names.LABEL_RUN, names.LABEL_STAGE, names.LABEL_ATTEMPT)


def attempt_labels(run: str, stage: str, attempt: int) -> dict[str, str]:
    """The labels that select one stage attempt's pods: its Job's own selector
    (manualSelector), so a pod carries these three and not the four the API server
    would add (job-name and controller-uid, each twice) for a generated one."""
    return dict(zip(POD_LABELS, (run, stage, str(attempt)), strict=True))


def label_selector(labels: Mapping[str, str]) -> str:
    """`labels` as a label selector string (k=v,...)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def job_pods_selector(job: Mapping[str, Any]) -> str:
    """The selector of a stage Job's pods: its own matchLabels (a manual one, or the
    controller-uid the API server generated for a Job from before), else its attempt's
    labels (an MPIJob read as a Job)."""
    spec = job.get("spec") or {}
    match = (spec.get("selector") or {}).get("matchLabels")
    if not match:
        labels = (job.get("metadata") or {}).get("labels") or {}
        match = {k: labels[k] for k in POD_LABELS if k in labels}
    return label_selector(match)


def job_name(run: str, stage: str, attempt: int) -> str:
    parts = [run, stage] + ([f"r{attempt}"] if attempt else [])
    return object_name(parts, JOB_NAME_MAX)


def stage_attempt(job: Mapping[str, Any], run: str,
                  stages: set[str]) -> tuple[str, int] | None:
    """The stage and attempt a Job of `run` is, by its labels and our own deterministic
    name for them; None for a look-alike, which is no attempt."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    stage = labels.get(names.LABEL_STAGE)
    try:
        attempt = int(labels.get(names.LABEL_ATTEMPT, "0"))
    except ValueError:
        return None
    if (stage in stages and labels.get(names.LABEL_RUN) == run
            and meta.get("name") == job_name(run, stage, attempt)):
        return str(stage), attempt
    return None


def jobs_by_stage(jobs: Sequence[Mapping[str, Any]], run: str, stages: set[str]
                  ) -> dict[str, dict[int, Mapping[str, Any]]]:
    """The run's stage Jobs by stage and attempt."""
    out: dict[str, dict[int, Mapping[str, Any]]] = {}
    for job in jobs:
        if (found := stage_attempt(job, run, stages)) is not None:
            out.setdefault(found[0], {})[found[1]] = job
    return out


def owned_by(meta: Mapping[str, Any], uid: str) -> bool:
    """Whether an object of ours (by name and labels) belongs to the run of `uid`, not to
    an earlier run of the same name: deleted (its objects not yet collected), or deleted
    with --cascade=orphan (which strips their ownerReferences)."""
    return any(str(r.get("uid", "")) == uid for r in meta.get("ownerReferences") or [])


EARLIER_NAMED = 5  # objects a wait names; the next pass names any left


def earlier_run_wait(objects: Sequence[str], namespace: str) -> str:
    """What a stage waits for while an earlier same-named run's objects ("kind/name")
    hold its names (its Jobs, item chunks, retry index maps)."""
    named = sorted(objects)[:EARLIER_NAMED]
    more = f" and {len(objects) - len(named)} more" if len(objects) > len(named) else ""
    return (f"{', '.join(named)}{more} belong to an earlier PipelineRun of this name, "
            "not this run: this stage starts once they are gone (the garbage collector "
            "deletes them soon after that run; if that run was deleted with "
            f"--cascade=orphan, delete them: kubectl delete {' '.join(named)} -n "
            f"{namespace})")


def items_configmap_name(run: str, stage: str, chunk: int) -> str:
    return object_name([run, stage, "items", str(chunk)])


def indexes_configmap_name(run: str, stage: str, attempt: int, chunk: int) -> str:
    return object_name([run, stage, f"r{attempt}", "indexes", str(chunk)])


def format_problem(fmt: str) -> str | None:
    """Why `fmt` is not a format with exactly one positional field for an int, or None."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(fmt) if f is not None]
    except ValueError as e:
        return f"format {fmt!r} does not parse ({e}); write e.g. \"night-{{:04d}}\""
    if len(fields) != 1 or fields[0] not in ("", "0"):
        return (f"format {fmt!r} must have exactly one positional field like {{}} or "
                f"{{:04d}}, found {len(fields)} field(s)")
    try:
        fmt.format(0)
    except (ValueError, TypeError, IndexError, KeyError) as e:
        return f"format {fmt!r} cannot format an integer ({e}); use e.g. {{:04d}} or {{:x}}"
    return None


def item_problem(item: str) -> str | None:
    """Why an item cannot be carried in the newline-separated list and an env var."""
    if item == "":
        return "is empty; an item must name something"
    if "\n" in item or "\r" in item:
        return "contains a line break; the items file is newline separated (CRLF input?)"
    if "\0" in item:
        return "contains a NUL byte, which no environment variable can carry"
    if len(item.encode()) > MAX_ITEM_BYTES:
        return f"is longer than {MAX_ITEM_BYTES} bytes"
    return None


def range_count(from_: int, to: int, step: int) -> int:
    return len(range(from_, to + 1, step)) if step >= 1 else 0


def matrix_fields(for_each: ForEach | None) -> tuple[str, ...]:
    """A matrix's field names in item order (name order: the API server sorts an
    object's keys, so the manifest's order never reaches the operator); () otherwise."""
    if for_each is None or for_each.matrix is None:
        return ()
    return tuple(sorted(for_each.matrix))


def matrix_count(matrix: Mapping[str, Sequence[str]]) -> int:
    return math.prod(len(v) for v in matrix.values()) if matrix else 0


def item_list(for_each: ForEach | None) -> list[str]:
    """The items of an inline, range or matrix source (["0"] for a stage without one).

    fromConfigMap, fromS3 and fromFile are resolved by the I/O layer, which then freezes
    what it read with `items_configmaps` like any other source.
    """
    if for_each is None:
        # A stage without forEach runs once (a summary or CONCAT step).
        return ["0"]
    if for_each.items is not None:
        return list(for_each.items)
    if for_each.range is not None:
        r = for_each.range
        problem = format_problem(r.format)
        if problem:
            raise ValueError(problem)
        return [r.format.format(i) for i in range(r.from_, r.to + 1, r.step)]
    if for_each.matrix is not None:
        fields = matrix_fields(for_each)
        if matrix_count(for_each.matrix) > MAX_ITEMS:
            raise ValueError(f"the matrix gives more than {MAX_ITEMS} items")
        # First field slowest: item k of field f is the k-th value in the product.
        return [FIELD_SEP.join(combo) for combo in
                itertools.product(*(for_each.matrix[f] for f in fields))]
    raise ValueError("item_list() handles items, range and matrix; fromConfigMap, fromS3 "
                     "and fromFile are I/O")


def chunk(lines: Sequence[str], budget: int = CHUNK_BYTES) -> list[tuple[int, list[str]]]:
    """(start index, lines) chunks whose newline-joined text stays within `budget` bytes."""
    chunks: list[tuple[int, list[str]]] = []
    current: list[str] = []
    size = 0
    start = 0
    for i, line in enumerate(lines):
        n = len(line.encode()) + 1
        if current and size + n > budget:
            chunks.append((start, current))
            current, size, start = [], 0, i
        current.append(line)
        size += n
    if current or not chunks:
        chunks.append((start, current))
    return chunks


def stage_env(run: RunRef, stage: str, last_step: str,
              fuse_mounts: Sequence[str] = ()) -> dict[str, str]:
    """The NIGHTSHIFT_* values that are the same in every pod of every attempt of a
    stage; run.sh exports them from names.STAGE_ENV_KEY (the attempt is not here: a
    retry Job's pods get it in their env, and run.sh defaults it to 0)."""
    env = {
        names.ENV_RUN: run.name,
        names.ENV_STAGE: stage,
        names.ENV_NAMESPACE: run.namespace,
        names.ENV_ITEMS_FILE: names.ITEMS_FILE,
        names.ENV_LAST_STEP: last_step,
    }
    if fuse_mounts:
        env[names.ENV_FUSE_MOUNTS] = ":".join(fuse_mounts)
    return env


def items_configmaps(run: RunRef, stage: str, items: Sequence[str],
                     budget: int = CHUNK_BYTES, *, last_step: str,
                     fuse_mounts: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The ConfigMaps that freeze a stage's items; the first also carries run.sh and
    the stage's env file. `last_step`: the name of the stage's last step; `fuse_mounts`:
    the node FUSE mounts run.sh waits for (binding.fuse_mounts)."""
    out = []
    for n, (start, lines) in enumerate(chunk(items, budget)):
        data = {chunk_key(names.ITEMS_KEY, start): "".join(f"{x}\n" for x in lines)}
        if n == 0:
            data[names.RUN_SH_KEY] = RUN_SH
            # Names are DNS labels and step names too (the CRD's patterns): no "=" and
            # no newline can break a line.
            data[names.STAGE_ENV_KEY] = "".join(
                f"{k}={v}\n" for k, v in stage_env(run, stage, last_step, fuse_mounts).items())
        out.append(_configmap(run, stage, items_configmap_name(run.name, stage, n), data,
                              start, len(lines), len(items)))
    return out


def indexes_configmaps(
    run: RunRef, stage: str, attempt: int, indexes: Sequence[int], budget: int = CHUNK_BYTES
) -> list[dict[str, Any]]:
    """A retry Job's map from completion index to original item index, one per line."""
    lines = [str(i) for i in indexes]
    return [
        _configmap(run, stage, indexes_configmap_name(run.name, stage, attempt, n),
                   {chunk_key(names.INDEXES_KEY, start): "".join(f"{x}\n" for x in part)},
                   start, len(part), len(lines))
        for n, (start, part) in enumerate(chunk(lines, budget))
    ]


def _configmap(run: RunRef, stage: str, name: str, data: dict[str, str], start: int,
               count: int, total: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": run.namespace,
            "labels": run.labels(stage, "items"),
            "annotations": {
                names.ANNOTATION_ITEM_COUNT: str(count),
                names.ANNOTATION_ITEM_START: str(start),
                names.ANNOTATION_ITEMS_TOTAL: str(total),
            },
            "ownerReferences": [run.owner_reference()],
        },
        # Frozen: the run sees the same items on every attempt and after restarts.
        "immutable": True,
        "data": data,
    }


# POSIX sh only: user images are guaranteed nothing but /bin/sh. Variables are global
# (no `local` in POSIX), which is fine for this straight-line script.
RUN_SH = f"""#!/bin/sh
# Nightshift step wrapper: {names.ENV_ITEM}, {names.ENV_ITEM_INDEX} (and a matrix's fields)
# for this pod's {names.ENV_COMPLETION_INDEX}; {{item}}, {{index}} and {{<field>}} in the
# step's argv replaced, one argument each; then exec the step. Items are data, never
# shell text: no eval. A batched stage ({names.ENV_BATCH} > 1) runs the step once per
# item of its batch in the loop at the end instead (pipelinerun/batch.py). First, the
# node FUSE mounts the steps use are waited for (pipelinerun/fusewait.py).
set -eu
step=$1
shift
if [ "${{1-}}" = "--" ]; then shift; fi
dir=${{0%/*}}
# The stage's constants: KEY=value lines, exported as data (read, never sourced).
if [ -r "$dir/{names.STAGE_ENV_KEY}" ]; then
while IFS='=' read -r key value; do
case $key in NIGHTSHIFT_*) export "$key=$value" ;; esac
done < "$dir/{names.STAGE_ENV_KEY}"
fi
# First attempts carry no attempt in their env (retry Jobs do).
{names.ENV_ATTEMPT}=${{{names.ENV_ATTEMPT}:-0}}
export {names.ENV_ATTEMPT}
{fusewait.SH_FUSE_WAIT}\
# item_env: the item of position ${names.ENV_COMPLETION_INDEX}, exported with its fields.
item_env() {{
{itemlookup.SH_LOOKUP}\
{names.ENV_ITEM}=$item
{names.ENV_ITEM_INDEX}=$orig
export {names.ENV_ITEM} {names.ENV_ITEM_INDEX}
{itemfields.SH_FIELDS}\
}}
# run_step ARGV: the step with the placeholders of the current item replaced (a
# function's "$@" is its own, so each item starts from the original argv).
run_step() {{
{itemfields.SH_ARGV}\
if [ -x {names.STEP_BINARY} ]; then exec {names.STEP_BINARY} "$step" "$@"; else exec "$@"; fi
}}
if [ "${{{names.ENV_BATCH}:-1}}" -le 1 ]; then
item_env
run_step "$@"
fi
{batchmod.SH_BATCH}"""
