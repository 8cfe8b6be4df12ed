"""Reading a CRD of crds/ and checking its schema is documented (kubectl explain's text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[1] / "crds"


def load_crd(filename: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((CRDS / filename).read_text())
    return doc


def openapi_schema(filename: str) -> dict[str, Any]:
    s: dict[str, Any] = load_crd(filename)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return s


def undocumented(s: dict[str, Any], path: str = "") -> list[str]:
    """Paths of properties, list items and map values without a description."""
    missing = []
    for name, prop in (s.get("properties") or {}).items():
        p = f"{path}.{name}"
        if name != "metadata" and not prop.get("description"):
            missing.append(p)
        missing += undocumented(prop, p)
    if isinstance(s.get("items"), dict):
        if not s["items"].get("description"):
            missing.append(f"{path}[]")
        missing += undocumented(s["items"], f"{path}[]")
    if isinstance(s.get("additionalProperties"), dict):
        missing += undocumented(s["additionalProperties"], f"{path}{{}}")
    return missing
