"""A stage's exact set of succeeded items, kept where the status cannot hold it.

`status.stages[].succeededItems` is cut to 2 KiB, so that a run's status stays a few KB
at 100,000 items. While a stage's Jobs exist their `completedIndexes` say the rest; once
they are gone (a TTL, a clean-up, a Job deleted mid-run) the cut record alone would make
a rerunFailed retry or a lost Job's replacement run succeeded items again. So while a
stage's record is cut, the run keeps the exact set in one ConfigMap of its own per
stage (`<run>-<stage>-done`, key `succeeded`, compressed ranges: about 390 KB at worst
for 100,000 items; exact in any stage of up to about 200,000 items, cut past that), written in
a pass whose status is not held back (so no more often than the status) when it
differs from what was kept, and read once per loop (after an operator restart or a
peering pause, or when the run is first seen): pipelinerun/reconcile.py does both; this
module is pure.

The set only ever holds items a Job of the run reported complete, so adding it to what
the Jobs and the record say can never skip an item that did not succeed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nightshift.api.events import Event
from nightshift.pipelinerun.items import RunRef, object_name
from nightshift.pipelinerun.progress import record_ranges

KEY = "succeeded"
# Characters of ranges: under the API server's 1 MiB for a ConfigMap, with room for its
# metadata (managed fields included).
CHARS = 900_000


def configmap_name(run: str, stage: str) -> str:
    return object_name([run, stage, "done"])


def render(run: RunRef, stage: str, text: str) -> dict[str, Any]:
    """The stage's done-set ConfigMap: mutable (it grows as items succeed), owned by
    the run, labelled like its item ConfigMaps (component `done`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(run.name, stage),
            "namespace": run.namespace,
            "labels": run.labels(stage, "done"),
            "ownerReferences": [run.owner_reference()],
        },
        "data": {KEY: text},
    }


def record(succeeded: Iterable[int]) -> str:
    """The ranges the ConfigMap holds: exact up to its budget (any stage of up to
    about 200,000 items), past it cut as succeededItems is, longest ranges kept: never
    more than did succeed, so items past the cut run again rather than being skipped."""
    text, _ = record_ranges(succeeded, CHARS)
    return text


def refused(stage: str, name: str, why: str) -> Event:
    """What a refused done-set write means (reconcile keeps the run going: it is a
    record beside the status, not the work)."""
    return Event("Warning", "DoneSetNotKept", (
        f"stage {stage}: ConfigMap {name}, the exact record of its succeeded items "
        f"(succeededItems is cut past 2 KiB), was refused: {why}. Until it is kept, a "
        "lost Job's replacement or a rerunFailed retry may run again succeeded items the "
        "cut record leaves out; mend what the API server names (a ConfigMap quota, a "
        "policy, the operator's permissions); the run goes on meanwhile"))
