from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from nightshift.api.virtualcluster import VirtualClusterSpec

CRD = Path(__file__).resolve().parents[2] / "crds" / "virtualcluster.yaml"


def crd() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return doc


def schema() -> dict[str, Any]:
    s: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return s


def walk(s: dict[str, Any], path: str) -> list[str]:
    """Paths of properties without a description."""
    missing = []
    for name, prop in (s.get("properties") or {}).items():
        p = f"{path}.{name}"
        if name != "metadata" and not prop.get("description"):
            missing.append(p)
        missing += walk(prop, p)
    if isinstance(s.get("items"), dict):
        if not s["items"].get("description"):
            missing.append(f"{path}[]")
        missing += walk(s["items"], f"{path}[]")
    if isinstance(s.get("additionalProperties"), dict):
        missing += walk(s["additionalProperties"], f"{path}{{}}")
    return missing


def test_every_property_has_a_description() -> None:
    assert walk(schema(), "") == []


def _model_fields(model: type[BaseModel]) -> set[str]:
    return {f.alias or n for n, f in model.model_fields.items()}


def _compare(model: type[BaseModel], s: dict[str, Any], path: str) -> list[str]:
    diffs = []
    props = s.get("properties", {})
    fields = _model_fields(model)
    for extra in sorted(set(props) ^ fields):
        diffs.append(f"{path}.{extra}")
    for name, f in model.model_fields.items():
        key = f.alias or name
        if key not in props:
            continue
        prop = props[key]
        ann = f.annotation
        inner = getattr(ann, "__args__", (ann,))
        for t in inner:
            if isinstance(t, type) and issubclass(t, BaseModel):
                target = prop.get("items", prop)
                diffs += _compare(t, target, f"{path}.{key}")
    return diffs


def test_field_names_match_models() -> None:
    spec = schema()["properties"]["spec"]
    assert _compare(VirtualClusterSpec, spec, "spec") == []


def test_names_and_columns() -> None:
    names = crd()["spec"]["names"]
    assert names["shortNames"] == ["nsvc"] and names["categories"] == ["nightshift"]
    assert crd()["spec"]["scope"] == "Namespaced"
    columns = [c["name"] for c in crd()["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Provider", "Pools", "Nodes", "$/h", "Ready", "Age"]


def test_enums_match_models() -> None:
    pool = schema()["properties"]["spec"]["properties"]["pools"]["items"]["properties"]
    from nightshift.api.virtualcluster import POOL_CLASSES
    assert tuple(pool["class"]["enum"]) == POOL_CLASSES
