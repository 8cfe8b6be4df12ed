"""Adding and removing a kind's finalizer: one merge patch, guarded by the
resourceVersion read (a concurrent edit makes it a 409, which the engine retries)."""

from __future__ import annotations

from typing import Any

from nightshift.kube import Kube


def set_finalizer(kube: Kube, api_version: str, kind: str, obj: dict[str, Any],
                  finalizer: str, *, add: bool) -> dict[str, Any]:
    """`obj` as the server holds it after adding (or removing) `finalizer`."""
    meta = obj["metadata"]
    current = [f for f in meta.get("finalizers") or [] if f != finalizer]
    wanted = [*current, finalizer] if add else current
    return kube.merge_patch(api_version, kind, meta["name"], meta["namespace"], {"metadata": {
        "finalizers": wanted, "resourceVersion": meta.get("resourceVersion")}})
