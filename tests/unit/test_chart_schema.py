"""values.schema.json of both charts: strict, every value described, in step with
values.yaml, and the collaboration's virtualCluster.spec the CRD's own spec schema
(UPDATE_GOLDEN=1 rewrites that part from crds/virtualcluster.yaml)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_chart_lint import COLLABORATION, NIGHTSHIFT, ROOT

CHARTS = [NIGHTSHIFT, COLLABORATION]


def _schema(chart: Path) -> dict[str, Any]:
    return dict(json.loads((chart / "values.schema.json").read_text()))


def _walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _walk(node[key], f"{path}[{key}]")


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
def test_every_value_is_described_and_objects_are_strict(chart: Path) -> None:
    problems = []
    for path, node in _walk(_schema(chart), "values"):
        if not str(node.get("description") or "").strip():
            problems.append(f"{path}: no description")
        if node.get("type") == "object" and "additionalProperties" not in node:
            # Strict means deciding: false for our own keys, a schema for maps, true
            # only for Kubernetes structures passed through (affinity, a spec).
            problems.append(f"{path}: object without additionalProperties")
        if node.get("additionalProperties") is True and "passed through" not in str(
                node.get("description")) and "as Kubernetes defines it" not in str(
                node.get("description")) and "Kubernetes Affinity" not in str(
                node.get("description")):
            problems.append(f"{path}: free-form object whose description does not say "
                            "what passes through")
    assert not problems, "\n".join(problems)


def _defaults_match(schema: dict[str, Any], values: Any, path: str) -> Iterator[str]:
    """Each strict object's keys in values.yaml are exactly its schema's properties:
    values.yaml shows every value with its default."""
    props = schema.get("properties")
    if not isinstance(values, dict) or not props or schema.get("additionalProperties"):
        return
    if path == "values.virtualCluster.spec":
        return  # the CRD's spec: values.yaml holds an example, not every field
    if set(values) != set(props):
        yield (f"{path}: values.yaml has {sorted(set(values) - set(props))} beyond the "
               f"schema and lacks {sorted(set(props) - set(values))}")
    for key in set(values) & set(props):
        yield from _defaults_match(props[key], values[key], f"{path}.{key}")


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
def test_values_yaml_shows_every_value(chart: Path) -> None:
    values = yaml.safe_load((chart / "values.yaml").read_text())
    problems = list(_defaults_match(_schema(chart), values, "values"))
    assert not problems, "\n".join(problems)


def crd_spec_as_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """The CRD's structural schema as JSON schema: x-kubernetes-* dropped (the API
    server still runs the CEL rules), and objects closed, as the API server's pruning
    would silently drop an unknown (misspelled) field."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {k: crd_spec_as_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = crd_spec_as_json_schema(value)
        else:
            out[key] = value
    if node.get("type") == "object" and "properties" in node \
            and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def test_collaboration_virtualcluster_spec_is_the_crds() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "virtualcluster.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    want = crd_spec_as_json_schema(spec)
    path = COLLABORATION / "values.schema.json"
    schema = _schema(COLLABORATION)
    vc = schema["properties"]["virtualCluster"]["properties"]
    if os.environ.get("UPDATE_GOLDEN") == "1":
        vc["spec"] = want
        path.write_text(json.dumps(schema, indent=2) + "\n")
        return
    assert vc["spec"] == want, (f"{path}: virtualCluster.spec differs from "
                                "crds/virtualcluster.yaml; UPDATE_GOLDEN=1 rewrites it")
