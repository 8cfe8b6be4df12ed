from __future__ import annotations

import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from nightshift.sharedstorage import spec as models
from nightshift.sharedstorage.spec import SharedStorageSpec
from tests.crdutil import load_crd, openapi_schema, undocumented

CRD = "sharedstorage.yaml"


def schema() -> dict[str, Any]:
    return openapi_schema(CRD)


def spec_schema() -> dict[str, Any]:
    s: dict[str, Any] = schema()["properties"]["spec"]
    return s


def test_every_property_has_a_description() -> None:
    assert undocumented(schema()) == []


def _models(ann: Any) -> list[type[BaseModel]]:
    args = typing.get_args(ann) if isinstance(ann, types.UnionType) or typing.get_origin(
        ann) is not None else (ann,)
    out = []
    for t in args:
        if isinstance(t, type) and issubclass(t, BaseModel):
            out.append(t)
        elif typing.get_args(t):
            out += _models(t)
    return out


def _compare(model: type[BaseModel], s: dict[str, Any], path: str) -> list[str]:
    diffs = []
    props = s.get("properties", {})
    fields = {f.alias or n for n, f in model.model_fields.items()}
    for extra in sorted(set(props) ^ fields):
        diffs.append(f"{path}.{extra}")
    for name, f in model.model_fields.items():
        key = f.alias or name
        if key in props:
            prop = props[key]
            for sub in _models(f.annotation):
                diffs += _compare(sub, prop.get("items", prop), f"{path}.{key}")
    return diffs


def test_field_names_match_models() -> None:
    assert _compare(SharedStorageSpec, spec_schema(), "spec") == []


def _defaults(model: type[BaseModel], s: dict[str, Any], path: str) -> list[str]:
    """Fields whose CRD default differs from the model's (or exists in one only)."""
    diffs = []
    props = s.get("properties", {})
    for name, f in model.model_fields.items():
        key = f.alias or name
        prop = props.get(key, {})
        if "default" in prop:
            mine = f.get_default(call_default_factory=True)
            if mine != prop["default"]:
                diffs.append(f"{path}.{key}: CRD {prop['default']!r}, model {mine!r}")
        elif not f.is_required():
            mine = f.get_default(call_default_factory=True)
            # Empty defaults mean what an absent field means; a nested model's default
            # is checked field by field below.
            if mine not in (None, False, "", [], {}) and not isinstance(mine, BaseModel):
                diffs.append(f"{path}.{key}: model default {mine!r}, none in the CRD")
        for sub in _models(f.annotation):
            diffs += _defaults(sub, prop.get("items", prop), f"{path}.{key}")
    return diffs


def test_defaults_match_models() -> None:
    # A model defaulting differently from the API server would render an object stored
    # before a default existed unlike one stored after.
    assert _defaults(SharedStorageSpec, spec_schema(), "spec") == []


def test_names_and_columns() -> None:
    crd = load_crd(CRD)
    names = crd["spec"]["names"]
    assert names["kind"] == "SharedStorage" and names["plural"] == "sharedstorages"
    assert names["shortNames"] == ["nsss"] and names["categories"] == ["nightshift"]
    assert crd["metadata"]["name"] == "sharedstorages.nightshift.io"
    assert crd["spec"]["scope"] == "Namespaced"
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Type", "Ready", "Endpoint", "Age"]


def test_short_name_is_free_among_ours() -> None:
    taken = {n for f in ("pipelinerun.yaml", "virtualcluster.yaml")
             for n in load_crd(f)["spec"]["names"].get("shortNames", [])}
    assert not taken & set(load_crd(CRD)["spec"]["names"]["shortNames"])


@pytest.mark.parametrize(("path", "values"), [
    (("type",), models.STORAGE_TYPES),
    (("cvmfs", "squid", "service", "type"), models.SERVICE_TYPES),
])
def test_enums_match_models(path: tuple[str, ...], values: tuple[str, ...]) -> None:
    s = spec_schema()
    for key in path:
        s = s["properties"][key]
    assert tuple(s["enum"]) == values


def test_phases_match_models() -> None:
    assert tuple(schema()["properties"]["status"]["properties"]["phase"]["enum"]) == \
        models.PHASES


def test_every_rule_has_a_message() -> None:
    def rules(s: dict[str, Any]) -> list[dict[str, Any]]:
        out = list(s.get("x-kubernetes-validations", []))
        for prop in (s.get("properties") or {}).values():
            out += rules(prop)
        if isinstance(s.get("items"), dict):
            out += rules(s["items"])
        return out
    found = rules(schema())
    assert len(found) >= 12
    assert all(r.get("message") for r in found)
