"""pipelinerun/podvalues.py agrees with what a v1.34 API server accepted and refused.

The refusals were seen with `kubectl apply --dry-run=server` of rendered Jobs (the
table in docs/security.md); these pin the Python side to the same answers.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from nightshift.api.quantities import quantity, same_quantity
from nightshift.pipelinerun import podvalues as pv


@pytest.mark.parametrize(("text", "value"), [
    ("1", Decimal(1)), (2, Decimal(2)), ("500m", Decimal("0.5")), ("1.5", Decimal("1.5")),
    ("4Gi", Decimal(4 * 2**30)), ("1Ki", Decimal(1024)), ("2M", Decimal(2_000_000)),
    ("1e3", Decimal(1000)), ("1E", Decimal(10**18)), ("+1", Decimal(1)), (".5", Decimal("0.5")),
    ("-1Gi", Decimal(-(2**30))), ("100n", Decimal("1E-7")),
])
def test_quantities_the_api_server_reads(text: Any, value: Decimal) -> None:
    assert quantity(text) == value


@pytest.mark.parametrize("text", ["1x", "", "1 Gi", "Gi", "1.2.3", "1GiB", "1e", True, None,
                                  1.5, "0x10"])
def test_quantities_the_api_server_refuses(text: Any) -> None:
    assert quantity(text) is None


def test_resources_as_the_api_server_checks_them() -> None:
    ok = {"requests": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1},
          "limits": {"cpu": "2", "nvidia.com/gpu": "1"}}
    assert pv.resources_problems("r", ok) == []
    # Extended resources may give only a limit (the request defaults to it).
    assert pv.resources_problems("r", {"limits": {"example.com/fpga": "1"}}) == []
    hp = {"requests": {"hugepages-2Mi": "4Mi", "memory": "1Gi"},
          "limits": {"hugepages-2Mi": "4Mi"}}
    assert pv.resources_problems("r", hp) == []
    found = [str(p) for p in pv.resources_problems("r", {"request": {"cpu": "1"}})]
    assert found == ["r.request: is not a field of resources; use requests, limits or claims"]
    assert pv.resources_problems("r", {"requests": {"kubernetes.io/x": "1"},
                                       "limits": {"kubernetes.io/x": "1"}})


@pytest.mark.parametrize(("env", "field"), [
    ([{"name": "1A", "value": "x"}], None),  # relaxed names (GA in 1.34) are fine
    ([{"name": "A B", "value": "x"}], None),
    ([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}}], None),
    ([{"name": "A", "value": "", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
     None),
    ([{"name": "Aé", "value": "x"}], "e[0].name"),
    ([{"name": "A", "value": 3}], "e[0].value"),
    ([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}}],
     "e[0].valueFrom.secretKeyRef.name"),
    ([{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "a/b"}}}],
     "e[0].valueFrom.configMapKeyRef.key"),
    ([{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}}],
     "e[0].valueFrom.resourceFieldRef.resource"),
    ([{"name": "A", "valueFrom": {}}], "e[0].valueFrom"),
    ([{"name": "JOB_COMPLETION_INDEX", "value": "0"}], "e[0].name"),
    ([{"name": "NIGHTSHIFT_ITEM", "value": "m31"}], "e[0].name"),
    ([{"name": "NIGHTSHIFT_FUSE_WAIT_S", "value": "300"}], None),  # a documented knob
])
def test_env_as_the_api_server_checks_it(env: list[dict[str, Any]], field: str | None) -> None:
    found = pv.env_problems("e", env)
    assert [p.path for p in found] == ([field] if field else []), found


def test_qualified_names_and_label_values() -> None:
    assert pv.qualified_name_problem("example.com/a_b.c") is None
    assert pv.qualified_name_problem("pod-complete.stage.kwok.x-k8s.io/delay") is None
    for bad in ("a/b/c", "Bad_Prefix/k", "k" * 64, "/k", "-k", "a b"):
        assert pv.qualified_name_problem(bad), bad
    assert pv.labels_problems("l", {"k": "Value_1.x"}) == []
    assert [p.path for p in pv.labels_problems("l", {"k": "v" * 64})] == ["l[k]"]


@pytest.mark.parametrize(("image", "ok"), [
    ("busybox", True), ("busybox:1.36", True), ("nightshift-runner:dev", True),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/img:v1", True),
    ("localhost:5000/a/b@sha256:" + "0" * 64, True), ("BusyBox", False),
    ("busy box", False), (" busybox", False), ("busybox:a b", False), ("a:", False),
])
def test_images_the_kubelet_can_pull(image: str, ok: bool) -> None:
    assert (pv.image_problem("i", image) == []) == ok


@pytest.mark.parametrize(("a", "b", "same"), [
    ("1.5Ti", "1536Gi", True), ("1024Gi", "1Ti", True), ("0.5", "500m", True),
    ("1Gi", "1G", False), ("1", "01", False), ("x", "x", True), ("1Gi", "x", False),
])
def test_one_quantity_written_two_ways(a: str, b: str, same: bool) -> None:
    assert same_quantity(a, b) is same and same_quantity(b, a) is same
