"""The Grafana dashboard shipped with the chart (charts/nightshift/dashboards/): it loads,
its panels and targets are well-formed, and every series it queries is one the operator
exports (nightshift.metrics), with labels that metric has."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from nightshift import metrics
from tests.unit.test_chart_lint import NIGHTSHIFT, render

DASHBOARD = NIGHTSHIFT / "dashboards" / "nightshift.json"
PANEL_TYPES = {"timeseries", "stat", "bargauge", "gauge", "table", "barchart", "piechart"}
# What issue 11 asks the dashboard to show, by panel title.
REQUIRED_PANELS = {"Runs by phase", "Items by state per stage", "Reconcile duration",
                   "Reconcile errors", "API calls by verb", "Wake-up coalescing"}
BUILTIN_VARS = {"__rate_interval", "__interval", "__range"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def exported() -> dict[str, set[str]]:
    """Series names the operator exports -> their label names (histograms add le)."""
    out: dict[str, set[str]] = {}
    for obj in vars(metrics).values():
        if not isinstance(obj, MetricWrapperBase):
            continue
        name, kind = obj._name, obj._type
        labels = set(obj._labelnames)
        if kind == "counter":
            out[f"{name}_total"] = labels
        elif kind == "histogram":
            out[f"{name}_bucket"] = labels | {"le"}
            out[f"{name}_sum"] = out[f"{name}_count"] = labels
        else:
            out[name] = labels
    return out


def _targets(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for p in dashboard["panels"] for t in p["targets"]]


def test_top_level(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] == "Nightshift"
    assert re.fullmatch(r"[-a-z0-9]{1,40}", dashboard["uid"])
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"]["uid"] == "${datasource}", v["name"]


def test_panels(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    assert {p["title"] for p in panels} >= REQUIRED_PANELS
    cells: set[tuple[int, int]] = set()
    for p in panels:
        assert p["type"] in PANEL_TYPES, p["title"]
        assert p["description"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"]["uid"] == "${datasource}"


def test_queries_use_what_the_operator_exports(dashboard: dict[str, Any]) -> None:
    series = exported()
    variables = {v["name"] for v in dashboard["templating"]["list"]} | BUILTIN_VARS
    used: set[str] = set()
    for t in _targets(dashboard):
        expr = t["expr"]
        names = set(re.findall(r"\bnightshift_[a-z_]+", expr))
        assert names, f"{expr}: queries no nightshift series"
        unknown = names - set(series)
        assert not unknown, f"{expr}: {unknown} are not exported by nightshift.metrics"
        used |= names
        labels = set().union(*(series[n] for n in names))
        grouped = {lbl.strip() for group in re.findall(r"by \(([^)]*)\)", expr)
                   for lbl in group.split(",")}
        matched = set(re.findall(r"([a-z_]+)=~?\"", expr))
        shown = set(re.findall(r"\{\{(\w+)\}\}", t["legendFormat"]))
        for what, got in (("groups by", grouped), ("matches", matched),
                          ("shows", shown)):
            assert got <= labels, f"{expr} {what} {got - labels}, labels are {labels}"
        refs = set(re.findall(r"\$\{?(\w+)", expr))
        assert refs <= variables, f"{expr}: undefined variables {refs - variables}"
    must = {"nightshift_runs", "nightshift_items", "nightshift_reconcile_seconds_bucket",
            "nightshift_reconcile_errors_total", "nightshift_api_calls_total",
            "nightshift_wakeups_total", "nightshift_passes_total"}
    assert must <= used, f"the dashboard does not show {must - used}"


def test_shipped_in_a_configmap_for_grafana() -> None:
    objs = render(NIGHTSHIFT, {"dashboards.enabled": True, "dashboards.namespace": "grafana"})
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["nightshift.json"]) == json.loads(DASHBOARD.read_text())
    assert not [o for o in render(NIGHTSHIFT) if o["kind"] == "ConfigMap"]
