"""Drift: does the API server's copy of an object lack something we render? Pure.

Every kind that applies rendered objects each pass (VirtualCluster's NodePools, a
SharedStorage's workloads) re-applies only what drifted: a hand edit is restored on
the next pass, and a pass that finds everything in place writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nightshift.api import names
from nightshift.api.quantities import same_quantity

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
    if not all(contains(observed.get(k), v) for k, v in desired.items()
               if k not in _NOT_PAYLOAD):
        return True
    applied = applied_paths(observed)
    if applied - rendered_paths(desired) - _HANDED_OVER:
        return True
    # An atomic map (a NodePool template's labels) is one field to the server: a key we
    # no longer render stays in it unless the whole map is compared.
    return any(isinstance(want := _at(desired, p), Mapping) and want
               and _at(observed, p) != want for p in applied)


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


# Fields a render stops setting to hand them to another controller (a squid
# Deployment's replicas to its HPA): removing them by apply would reset them to their
# default (1 replica) until that controller writes them, so that alone is not drift.
_HANDED_OVER = frozenset({("spec", "replicas")})

# A field set's keys (fieldsV1, the managedFields format): "f:<name>" a map's field;
# "k:{...}", "v:<value>", "i:<n>" a list's item; "." the node itself.
_LIST_ITEM = ("k:", "v:", "i:")


def applied_paths(observed: Mapping[str, Any]) -> set[tuple[str, ...]]:
    """The fields our apply owns on the server's object, as paths, a list as one field:
    what a server-side apply without them would remove. A field we stop rendering (a
    pool's maxCPU removed, so its NodePool's limits.cpu) is in here and in no render,
    which `contains` alone cannot see (extra keys are the server's defaults to it)."""
    out: set[tuple[str, ...]] = set()
    for entry in (observed.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == names.FIELD_MANAGER and entry.get("operation") == "Apply":
            _walk_fields(entry.get("fieldsV1") or {}, (), out)
    return {p for p in out if p[0] != "metadata" or p[1] in ("labels", "annotations")}


def _walk_fields(node: Mapping[str, Any], path: tuple[str, ...],
                 out: set[tuple[str, ...]]) -> None:
    for key, child in node.items():
        if not key.startswith("f:"):
            continue
        here = (*path, key[2:])
        if isinstance(child, Mapping) and any(k.startswith(_LIST_ITEM) for k in child):
            out.add(here)  # a list: compared whole by `contains`
        elif isinstance(child, Mapping) and any(k.startswith("f:") for k in child):
            _walk_fields(child, here, out)
        else:
            out.add(here)


def rendered_paths(desired: Mapping[str, Any]) -> set[tuple[str, ...]]:
    """Every field path of a rendered object, maps walked, a list as one field."""
    out: set[tuple[str, ...]] = set()

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        for key, value in node.items():
            here = (*path, str(key))
            out.add(here)
            if isinstance(value, Mapping):
                walk(value, here)

    walk(desired, ())
    return out


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
    """`want` is in `have`: maps by key (extra keys in `have` allowed, empty strings,
    maps and lists in `want` may be absent), lists item by item at equal length, scalars
    equal."""
    if isinstance(want, Mapping):
        # An empty value we render ("", {}, []) the server does not keep (omitempty):
        # a PersistentVolume's storageClassName "" reads back absent.
        return isinstance(have, Mapping) and all(
            contains(have[k], v) if k in have else _dropped(v) for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(have, list) and len(have) == len(want)
                and all(contains(h, w) for h, w in zip(have, want, strict=True)))
    # The API server keeps a quantity in its canonical form (a claim's "1.5Ti" reads
    # back "1536Gi", a cpu "0.5" as "500m"): the same value is not drift.
    return bool(have == want) or same_quantity(have, want)


def _dropped(want: Any) -> bool:
    """An empty string, map or list, which the server drops; never false or 0, whose
    absence (automountServiceAccountToken, allowPrivilegeEscalation removed by hand)
    changes what the object does."""
    return isinstance(want, (str, Mapping, list)) and not want
