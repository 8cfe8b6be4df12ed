from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from nightshift.virtualcluster.spec import VirtualClusterSpec
from tests.crdutil import load_crd, openapi_schema, undocumented

CRD = "virtualcluster.yaml"


def crd() -> dict[str, Any]:
    return load_crd(CRD)


def schema() -> dict[str, Any]:
    return openapi_schema(CRD)


def test_every_property_has_a_description() -> None:
    assert undocumented(schema()) == []


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
    assert columns == ["Provider", "Pools", "Nodes", "Per pool", "$/h", "Cost", "Ready", "Age"]
    # Every column reads a field the status schema declares (none reads an array, whose
    # first element alone kubectl would show).
    status = schema()["properties"]["status"]["properties"]
    for col in crd()["spec"]["versions"][0]["additionalPrinterColumns"]:
        path = col["jsonPath"]
        assert "[*]" not in path, col
        if path.startswith(".status.") and "[" not in path:
            node: dict[str, Any] = {"properties": status}
            for part in path.removeprefix(".status.").split("."):
                assert part in node.get("properties", {}), col
                node = node["properties"][part]


def test_enums_match_models() -> None:
    pool = schema()["properties"]["spec"]["properties"]["pools"]["items"]["properties"]
    from nightshift.virtualcluster.spec import POOL_CLASSES
    assert tuple(pool["class"]["enum"]) == POOL_CLASSES
