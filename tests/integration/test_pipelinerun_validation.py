"""Bad PipelineRuns: refused by the real API server (CEL) or given an Invalid condition."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.bad_pipelineruns import BAD, BAD_UPDATES, GOOD_UPDATES
from tests.clusterutil import Kubectl
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import wait_phase

CEL = [(i, m, s) for i, m, kind, s in BAD if kind == "cel"]
INVALID = [(i, m, s) for i, m, kind, s in BAD if kind == "invalid"]


def _in(namespace: str, manifest: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    m = copy.deepcopy(manifest)
    m["metadata"]["namespace"] = namespace
    if name:
        m["metadata"]["name"] = name
    return m


@pytest.mark.parametrize(("case", "manifest", "expected"), CEL, ids=[c[0] for c in CEL])
def test_refused_by_the_api_server(case: str, manifest: dict[str, Any], expected: str,
                                   kubectl: Kubectl, crds: list[str], namespace: str) -> None:
    r = kubectl.apply_as_user(_in(namespace, manifest))
    assert r.returncode != 0, f"{case}: the API server accepted it"
    assert expected in r.stderr, f"{case}: expected {expected!r} in:\n{r.stderr}"


@pytest.mark.parametrize(("case", "manifest", "expected"), INVALID,
                         ids=[c[0] for c in INVALID])
def test_invalid_condition_names_the_problem(case: str, manifest: dict[str, Any],
                                             expected: str, kubectl: Kubectl, kube: Any,
                                             operator: OperatorProcess,
                                             namespace: str) -> None:
    # create, not apply: apply's last-applied annotation copies the whole spec, and a
    # case near the annotations' 256 KiB limit would be refused for that copy.
    kubectl("create", "-f", "-", input_=yaml.safe_dump(_in(namespace, manifest)))
    name = manifest["metadata"]["name"]
    run = wait_phase(kube, namespace, name, {"Failed", "Pending"}, 60)

    def invalid() -> dict[str, Any] | None:
        conds = (run.get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Invalid" and c["status"] == "True"),
                    None)

    cond = invalid()
    if cond is None:  # the status may predate validation by one pass
        run = wait_phase(kube, namespace, name, {"Failed"}, 30)
        cond = invalid()
    assert cond is not None, f"{case}: no Invalid condition in {run.get('status')}"
    assert expected in cond["message"], f"{case}: {cond['message']!r}"
    assert "spec." in cond["message"], f"{case}: message names no field: {cond['message']}"
    jobs = kubectl("get", "jobs", "-n", namespace, "-o", "name").stdout.strip()
    assert jobs == "", f"{case}: an invalid run created Jobs: {jobs}"


@pytest.mark.parametrize(("case", "manifest", "change", "expected"), BAD_UPDATES,
                         ids=[c[0] for c in BAD_UPDATES])
def test_immutable_fields(case: str, manifest: dict[str, Any], change: dict[str, Any],
                          expected: str, kubectl: Kubectl, crds: list[str],
                          namespace: str) -> None:
    created = _in(namespace, manifest, name=f"upd-{case}")
    # Created suspended so that no operator starts Jobs while we poke at it.
    created["spec"]["suspend"] = True
    kubectl.apply(created)
    changed = copy.deepcopy(created)
    changed["spec"].update(change)
    r = kubectl.apply_as_user(changed)
    assert r.returncode != 0, f"{case}: the change was accepted"
    assert expected in r.stderr, f"{case}: expected {expected!r} in:\n{r.stderr}"


@pytest.mark.parametrize(("case", "manifest", "change"), GOOD_UPDATES,
                         ids=[c[0] for c in GOOD_UPDATES])
def test_mutable_fields(case: str, manifest: dict[str, Any], change: dict[str, Any],
                        kubectl: Kubectl, crds: list[str], namespace: str) -> None:
    created = _in(namespace, manifest, name=f"ok-{case}")
    created["spec"]["suspend"] = True
    kubectl.apply(created)
    changed = copy.deepcopy(created)
    changed["spec"].update(change)
    kubectl.apply(changed)
