"""The Nightshift CRDs as shipped inside the package (offline validation needs them).

`crds/` at the repository root is the one source; the copies under this package are
kept byte-identical by tests/unit/test_validate_cli.py (`cp crds/*.yaml
operator/src/nightshift/admission/crds/` after changing one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml


@dataclass(frozen=True)
class Crd:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    schema: dict[str, Any]  # the version's openAPIV3Schema
    status_subresource: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def crd_texts() -> dict[str, str]:
    """File name -> text of every packaged CRD."""
    folder = resources.files("nightshift.admission").joinpath("crds")
    return {f.name: f.read_text(encoding="utf-8") for f in folder.iterdir()
            if f.name.endswith(".yaml")}


def parse_crd(doc: dict[str, Any]) -> list[Crd]:
    spec = doc["spec"]
    out = []
    for v in spec["versions"]:
        if not v.get("served", True):
            continue
        out.append(Crd(
            group=spec["group"], version=v["name"], kind=spec["names"]["kind"],
            plural=spec["names"]["plural"], namespaced=spec.get("scope") == "Namespaced",
            schema=v["schema"]["openAPIV3Schema"],
            status_subresource="status" in (v.get("subresources") or {})))
    return out


@functools.cache
def packaged() -> dict[tuple[str, str], Crd]:
    """(apiVersion, kind) -> CRD version, for every packaged CRD."""
    out: dict[tuple[str, str], Crd] = {}
    for text in crd_texts().values():
        for crd in parse_crd(yaml.safe_load(text)):
            out[(crd.api_version, crd.kind)] = crd
    return out


def kinds() -> dict[str, list[str]]:
    """kind -> the apiVersions it is served at."""
    out: dict[str, list[str]] = {}
    for api_version, kind in packaged():
        out.setdefault(kind, []).append(api_version)
    return out
