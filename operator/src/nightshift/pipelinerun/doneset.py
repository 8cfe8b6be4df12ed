"""A stage's exact set of succeeded items, kept where the status cannot hold it.

`status.stages[].succeededItems` is cut to 2 KiB, so that a run's status stays a few KB
at 100,000 items. While a stage's Jobs exist their `completedIndexes` say the rest; once
they are gone (a TTL, a clean-up, a Job deleted mid-run) the cut record alone would make
a rerunFailed retry or a lost Job's replacement run succeeded items again. So while a
stage's record is cut, the run keeps the exact set in one ConfigMap of its own per
stage (`<run>-<stage>-done`, key `succeeded`, compressed ranges: about 290 KB at worst
for 100,000 items), written only in a pass that writes the status (so no more often)
and read once per loop (after an operator restart, or when the run is first seen):
pipelinerun/reconcile.py does both; this module is pure.

The set only ever holds items a Job of the run reported complete, so adding it to what
the Jobs and the record say can never skip an item that did not succeed.
"""

from __future__ import annotations

from typing import Any

from nightshift.api import ranges
from nightshift.api.events import Event
from nightshift.pipelinerun.items import RunRef, object_name

KEY = "succeeded"


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


def parse(text: str, total: int) -> set[int]:
    try:
        return {i for i in ranges.parse(text) if i < total}
    except ValueError:
        return set()  # a damaged record claims nothing


def refused(stage: str, name: str, why: str) -> Event:
    """What a refused done-set write means (reconcile keeps the run going: it is a
    record beside the status, not the work)."""
    return Event("Warning", "DoneSetNotKept", (
        f"stage {stage}: ConfigMap {name}, the exact record of its succeeded items "
        f"(succeededItems is cut past 2 KiB), was refused: {why}. A lost Job's "
        "replacement or a rerunFailed retry may run again succeeded items the cut record "
        "leaves out; allow the run one more ConfigMap"))
