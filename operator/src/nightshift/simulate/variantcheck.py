"""A simulation's variants checked before anything runs. Pure.

The conversion keeps only what a simulation uses of each stage and pool, so a field a
variant misspells would be dropped without a word, and the variant would run as
written. So each variant's shape is checked first (the pools and stages it changes are
mappings by name), then the VirtualCluster and PipelineRun it gives are admitted as the
API server would admit them (unknown fields, types, the CRDs' rules), naming the
variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nightshift.admission import crds
from nightshift.admission.admit import admit
from nightshift.api import names
from nightshift.simulate.convert import BY_NAME, SimulationError, patched_spec

# The variant's parts (convert.BY_NAME), the kind each gives and what its listed entries
# are.
PARTS = (("virtualCluster", "VirtualCluster", "pool"), ("pipelineRun", "PipelineRun", "stage"))
SHOWN = 3  # messages quoted per object


def check(name: str, vc: Mapping[str, Any], run: Mapping[str, Any],
          variant: Mapping[str, Any]) -> None:
    """Raise SimulationError naming the variant and what is wrong with it."""
    _shape(name, variant)
    for (key, kind, _), doc in zip(PARTS, (vc, run), strict=True):
        spec = patched_spec(doc, variant, key)
        api_version = str(doc.get("apiVersion") or names.API_VERSION)
        crd = crds.packaged().get((api_version, kind))
        if crd is None:
            continue  # picking the documents says which apiVersion to use
        meta = dict(doc.get("metadata") or {})
        meta["namespace"] = meta.get("namespace") or "default"
        admission = admit({"apiVersion": api_version, "kind": kind, "metadata": meta,
                           "spec": spec}, crd)
        if admission.messages:
            said = "; ".join(admission.messages[:SHOWN])
            more = len(admission.messages) - SHOWN
            raise SimulationError(
                f"variant {name!r}: the {kind} {meta.get('name')!r} it gives is not valid: "
                f"{said}{f' (and {more} more)' if more > 0 else ''}")


def _shape(name: str, variant: Mapping[str, Any]) -> None:
    for key, _, what in PARTS:
        listed = BY_NAME[key]
        part = variant.get(key)
        if part is None:
            continue
        if not isinstance(part, Mapping):
            raise SimulationError(f"variant {name!r}: {key}: a mapping of the fields to "
                                  f"change, not a {type(part).__name__}")
        changes = part.get(listed)
        if changes is None:
            continue
        if not isinstance(changes, Mapping) or not all(
                isinstance(v, Mapping) or v is None for v in changes.values()):
            raise SimulationError(
                f"variant {name!r}: {key}.{listed}: a mapping of {what} name (or \"*\" for "
                f"all) to the fields to change, e.g. `{listed}: {{\"*\": {{...}}}}`, not "
                f"a list or a value")
