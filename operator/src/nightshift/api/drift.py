"""Drift: does the API server's copy of an object lack something we render? Pure.

Every kind that applies rendered objects each pass (VirtualCluster's NodePools, a
SharedStorage's workloads) re-applies only what drifted: a hand edit is restored on
the next pass, and a pass that finds everything in place writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nightshift.api import names

# Top-level keys that are not the object's payload: identity, metadata (compared
# separately, labels and annotations only) and what the server writes.
_NOT_PAYLOAD = frozenset({"apiVersion", "kind", "metadata", "status"})


def drifted(desired: Mapping[str, Any], observed: Mapping[str, Any] | None) -> bool:
    """True when the API server's object lacks something we render: it is missing, or a
    label, an annotation, its owners of ours, or a field of its payload (spec, or a
    ConfigMap's data) differs. Fields the server or another controller added (defaults,
    status) are not drift."""
    if observed is None:
        return True
    dm, om = desired.get("metadata") or {}, observed.get("metadata") or {}
    if not (contains(om.get("labels") or {}, dm.get("labels") or {})
            and contains(om.get("annotations") or {}, dm.get("annotations") or {})):
        return True
    if _owners(dm, dm) != _owners(om, dm):
        return True
    return not all(contains(observed.get(k), v) for k, v in desired.items()
                   if k not in _NOT_PAYLOAD)


def _owners(meta: Mapping[str, Any], desired: Mapping[str, Any]) -> set[str]:
    """The owners' UIDs that are ours to set: those we render, and any of our own kinds.
    An owner we no longer render is drift too: a claim whose storage went from
    reclaimPolicy Delete to Retain must lose its owner, or deleting the storage would
    still delete it (and its volume) through the garbage collector."""
    rendered = {str(r.get("uid")) for r in desired.get("ownerReferences") or []}
    return {str(r.get("uid")) for r in meta.get("ownerReferences") or []
            if r.get("uid") in rendered
            or str(r.get("apiVersion", "")).startswith(f"{names.GROUP}/")}


def contains(have: Any, want: Any) -> bool:
    """`want` is in `have`: maps by key (extra keys in `have` allowed), lists item by
    item at equal length, scalars equal."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            k in have and contains(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(have, list) and len(have) == len(want)
                and all(contains(h, w) for h, w in zip(have, want, strict=True)))
    return bool(have == want)
