"""The instance catalog the KWOK provider and the operator read on the local cluster.

Karpenter's example catalog (kwok/examples/aws_instance_types.json) lists each instance
type twice, once per OS, with the Windows entry first. The KWOK provider's `toNode` looks
the chosen type up by name and takes the first match, so every node it launches is
labeled `kubernetes.io/os=windows`. Our NodePools require `linux` (as EKS ones do), so
Karpenter's drift check marks each new node RequirementsDrifted within a second or two
and replaces it, evicting its pods, for ever. Nine old types (t2.micro, m1.small, ...)
also come as i386 before x86_64, with the same drift against an `amd64` pool. The bed
therefore feeds both the provider and the operator a copy with one entry per type: the
Linux one, i386 left out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Raise when linux_only changes what it keeps: the written file's path carries it.
FILTER_REVISION = 1


def linux_only(entries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The catalog entries that offer Linux on a 64-bit architecture, in their order."""
    return [e for e in entries
            if "linux" in e.get("operatingSystems", []) and e.get("architecture") != "i386"]


def write_linux_catalog(source: Path, target: Path) -> None:
    """Write `source`'s Linux entries to `target` (atomically: a reader never sees half)."""
    entries = linux_only(json.loads(source.read_text()))
    if not entries:
        raise ValueError(f"{source}: no instance type offers Linux; is it a KWOK catalog?")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, separators=(",", ":")))
    tmp.rename(target)
