"""What a kind with our finalizer shows while it is deleted, and when its spec cannot be
read. Pure: the same words and conditions for VirtualCluster and SharedStorage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from nightshift.api import conditions, names
from nightshift.api.fieldpath import field_path

DELETING = "Deleting"


def blocked(kind: str, namespace: str, name: str, runs: Sequence[str],
            consequence: str) -> tuple[str, str]:
    """The Deleting condition's (reason, message) while runs still use the object;
    `kind` as kubectl spells it (virtualcluster), `consequence` what forcing costs."""
    shown = ", ".join(runs[:10]) + (f" and {len(runs) - 10} more" if len(runs) > 10 else "")
    return ("InUse", f"kept while PipelineRun(s) {shown} use this {_title(kind)}; it is "
            f"deleted when they end. To delete it now ({consequence}): kubectl annotate "
            f"{kind} -n {namespace} {name} {names.ANNOTATION_FORCE_DELETE}=true")


def with_deleting(obj: Mapping[str, Any], conds: list[dict[str, Any]], why: tuple[str, str],
                  now: str) -> list[dict[str, Any]]:
    """`conds` with the Deleting condition set to (reason, message) `why`."""
    gen = int(obj["metadata"].get("generation", 0))
    old = (obj.get("status") or {}).get("conditions")
    mine = conditions.merge(old, [conditions.condition(DELETING, conditions.TRUE, why[0],
                                                       why[1], gen)], now=now)
    return [*[c for c in conds if c["type"] != DELETING], *mine]


def unreadable_status(obj: Mapping[str, Any], e: ValidationError, now: str,
                      **extra: Any) -> dict[str, Any]:
    """Only when the CRD in the cluster is older or newer than this operator: Invalid,
    naming the first field the operator could not read."""
    gen = int(obj["metadata"].get("generation", 0))
    first = e.errors()[0]
    msg = (f"{field_path('spec', *first.get('loc', ()))}: {first.get('msg')}: the CRD and "
           "the operator disagree; upgrade both")
    new = [conditions.condition(conditions.READY, conditions.FALSE, "Invalid", msg, gen),
           conditions.condition(conditions.INVALID, conditions.TRUE, "InvalidSpec", msg, gen)]
    old = (obj.get("status") or {}).get("conditions")
    return {**(obj.get("status") or {}), "observedGeneration": gen, **extra,
            "conditions": conditions.merge(old, new, now=now)}


def _title(kind: str) -> str:
    return {"virtualcluster": names.VIRTUALCLUSTER,
            "sharedstorage": names.SHAREDSTORAGE}.get(kind, kind)
