"""crds/pipelinerun.yaml: documented, in step with the models and with plan()'s status."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel

from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.spec import PHASES, PipelineRunSpec
from tests.crdutil import load_crd, openapi_schema, undocumented
from tests.unit.test_plan import failed, make_run, observe, start_a, with_status

CRD = "pipelinerun.yaml"
CEL_FUNCTIONS = {"all", "exists", "exists_one", "filter", "size", "map", "startsWith",
                 "matches", "contains"}


def crd() -> dict[str, Any]:
    return load_crd(CRD)


def schema() -> dict[str, Any]:
    return openapi_schema(CRD)


def test_every_property_has_a_description() -> None:
    assert undocumented(schema()) == []


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """BaseModel classes inside Optional[...] / list[...] annotations."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            out += _models_in(arg)
    return out


def _compare(model: type[BaseModel], s: dict[str, Any], path: str) -> list[str]:
    props = s.get("properties", {})
    fields = {f.alias or n: f for n, f in model.model_fields.items()}
    diffs = [f"{path}.{k}" for k in sorted(set(props) ^ set(fields))]
    for key, f in fields.items():
        if key in props:
            for sub in _models_in(f.annotation):
                prop = props[key]
                diffs += _compare(sub, prop.get("items", prop), f"{path}.{key}")
    return diffs


def test_field_names_match_models() -> None:
    assert _compare(PipelineRunSpec, schema()["properties"]["spec"], "spec") == []


def test_required_fields_are_required_in_models() -> None:
    stage = schema()["properties"]["spec"]["properties"]["stages"]["items"]
    for key in stage["required"]:
        field = next(f for n, f in PipelineRunSpec.model_fields["stages"].annotation
                     .__args__[0].model_fields.items() if (f.alias or n) == key)  # type: ignore[union-attr]
        assert field.is_required(), key


def rules(s: dict[str, Any], path: str = "") -> list[tuple[str, str, set[str]]]:
    """(path, rule, property names visible around it) for every CEL rule."""
    out = []
    here = set((s.get("properties") or {}).keys())
    for r in s.get("x-kubernetes-validations") or []:
        out.append((path, r["rule"], here))
    for name, prop in (s.get("properties") or {}).items():
        out += rules(prop, f"{path}.{name}")
    if isinstance(s.get("items"), dict):
        out += rules(s["items"], f"{path}[]")
    return out


def all_property_names(s: dict[str, Any]) -> set[str]:
    names = set((s.get("properties") or {}).keys())
    for prop in (s.get("properties") or {}).values():
        names |= all_property_names(prop)
    if isinstance(s.get("items"), dict):
        names |= all_property_names(s["items"])
    return names


def test_cel_rules_are_well_formed() -> None:
    known = all_property_names(schema()) | CEL_FUNCTIONS | {"name", "metadata"}
    found = rules(schema())
    assert len(found) >= 25
    for path, rule, _ in found:
        assert rule.count("(") == rule.count(")"), (path, rule)
        assert rule.count("[") == rule.count("]"), (path, rule)
        assert rule.count("'") % 2 == 0, (path, rule)
        assert "self" in rule, (path, rule)
        for ident in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)", rule):
            assert ident in known, (path, rule, ident)
        for ident in re.findall(r"has\((?:self|oldSelf|[a-z])\.([A-Za-z]+)\)", rule):
            assert ident in known, (path, rule, ident)


def test_immutable_and_mutable_fields() -> None:
    spec_rules = [r for p, r, _ in rules(schema()) if p == ".spec" and "oldSelf" in r]
    text = " ".join(spec_rules)
    for immutable in ("stages", "storage", "archive", "virtualCluster"):
        assert f"self.{immutable} == oldSelf.{immutable}" in text
    for mutable in ("parallelism", "suspend", "launch"):
        assert f"oldSelf.{mutable}" not in text


def test_lists_and_strings_are_bounded_for_cel_cost() -> None:
    spec = schema()["properties"]["spec"]

    def unbounded(s: dict[str, Any], path: str) -> list[str]:
        out = []
        if s.get("type") == "array" and "maxItems" not in s:
            out.append(path)
        if (s.get("type") == "string" and "maxLength" not in s and "enum" not in s):
            out.append(path)
        for name, prop in (s.get("properties") or {}).items():
            out += unbounded(prop, f"{path}.{name}")
        if isinstance(s.get("items"), dict):
            out += unbounded(s["items"], f"{path}[]")
        return out

    assert unbounded(spec, "spec") == []


def test_names_columns_and_status() -> None:
    c = crd()["spec"]
    assert c["names"]["shortNames"] == ["nsrun", "nsruns"]
    assert c["names"]["categories"] == ["nightshift"]
    version = c["versions"][0]
    assert version["subresources"] == {"status": {}}
    cols = [col["name"] for col in version["additionalPrinterColumns"]]
    assert cols == ["Phase", "Progress", "Failed", "Cost", "Age"]
    status = schema()["properties"]["status"]["properties"]
    assert tuple(status["phase"]["enum"]) == PHASES


def unknown_keys(value: Any, s: dict[str, Any], path: str) -> list[str]:
    if s.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        props = s.get("properties") or {}
        out = [f"{path}.{k}" for k in value if k not in props]
        for k, v in value.items():
            if k in props:
                out += unknown_keys(v, props[k], f"{path}.{k}")
        return out
    if isinstance(value, list):
        return [x for i, v in enumerate(value)
                for x in unknown_keys(v, s.get("items") or {}, f"{path}[{i}]")]
    return []


def test_plan_status_fits_the_status_schema() -> None:
    run = make_run()
    p, job = start_a(run)
    run["status"] = p.status
    samples = {"a": [{"index": 3, "exitCode": 2, "reason": "Error", "message": "m",
                      "item": "3"}]}
    p = plan(observe(run, [failed(job, "0-2,4-99", "3")], samples=samples))
    assert p.status["stages"][0]["failureSamples"] and p.status["stages"][0]["attempts"]
    assert unknown_keys(p.status, schema()["properties"]["status"], "status") == []
    running = plan(observe(run, [with_status(job, active=4)]))
    assert unknown_keys(running.status, schema()["properties"]["status"], "status") == []
