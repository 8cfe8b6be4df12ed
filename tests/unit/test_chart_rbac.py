"""The operator's RBAC grants exactly the calls it makes (nightshift.kubecalls.CALLS).

Renders the charts with helm and collects every rule bound to the operator's
ServiceAccount: a rule missing makes a call fail with 403 in the cluster, a rule extra
is privilege nobody needs. Both fail here, naming the row.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from nightshift import kubecalls
from tests.unit.test_chart_lint import COLLABORATION, NIGHTSHIFT, render

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)
# Verbs the API server checks resourceNames for (list and watch ignore them).
NAMED_VERBS = {"get", "patch", "update", "delete"}
OPERATOR_SA = ("nightshift", "nightshift")  # release "nightshift" in namespace "nightshift"


def bound_rules(objs: list[dict[str, Any]], sa: tuple[str, str]
                ) -> dict[str, list[dict[str, Any]]]:
    """The rules bound to ServiceAccount `sa` (name, namespace), by where they apply:
    "cluster" (a ClusterRoleBinding) or the namespace of a RoleBinding."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and (s["name"], s["namespace"]) == sa
                   for s in b.get("subjects") or []):
            continue
        ns = b["metadata"].get("namespace")
        ref = b["roleRef"]
        key = (ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"])
        assert key in roles, f"{b['kind']} {b['metadata']['name']} binds missing {key}"
        where = "cluster" if b["kind"] == "ClusterRoleBinding" else ns
        out[where] += roles[key].get("rules") or []
    return dict(out)


def grants(rules: list[dict[str, Any]]) -> set[Grant]:
    out: set[Grant] = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {rule}"
        if rule.get("resourceNames"):
            assert set(rule["verbs"]) <= NAMED_VERBS, f"resourceNames do not narrow {rule}"
        out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]}
    return out


def operator_grants(values: dict[str, Any]) -> dict[str, set[Grant]]:
    objs = render(NIGHTSHIFT, values)
    return {where: grants(rules) for where, rules in bound_rules(objs, OPERATOR_SA).items()}


def _diff(where: str, got: set[Grant], want: set[Grant]) -> str:
    lines = [f"{where}: the chart grants {g} but the operator never calls it "
             "(remove the rule, or add the call to nightshift/kubecalls.py)"
             for g in sorted(got - want)]
    lines += [f"{where}: the operator calls {w} but the chart does not grant it "
              "(add the rule to charts/nightshift/templates)" for w in sorted(want - got)]
    return "\n".join(lines)


def _want(scope: str, **flags: bool) -> set[Grant]:
    return {(g, r, v) for g, r, v, s in kubecalls.expected(**flags) if s == scope}


CASES = [
    pytest.param({}, True, True, False, id="defaults"),
    pytest.param({"peering.enabled": False, "rbac.readSecrets": True}, True, False, True,
                 id="all-namespaces-standalone-secrets"),
    pytest.param({"watchNamespaces": ["astro", "radio"], "replicas": 2,
                  "rbac.readSecrets": True}, False, True, True,
                 id="listed-namespaces-peering-secrets"),
    pytest.param({"watchNamespaces": ["astro"], "peering.enabled": False}, False, False,
                 False, id="listed-namespaces-standalone"),
]


@pytest.mark.parametrize(("values", "all_namespaces", "peering", "read_secrets"), CASES)
def test_operator_rbac_is_exactly_its_calls(values: dict[str, Any], all_namespaces: bool,
                                            peering: bool, read_secrets: bool) -> None:
    flags = {"all_namespaces": all_namespaces, "peering": peering,
             "read_secrets": read_secrets}
    got = operator_grants(values)
    cluster = _want(kubecalls.CLUSTER, **flags)
    namespaced = _want(kubecalls.NAMESPACE, **flags)
    if all_namespaces:
        # Watching every namespace: the namespaced rows apply cluster-wide too.
        want = {"cluster": cluster | namespaced}
    else:
        want = {"cluster": cluster, **{ns: namespaced for ns in values["watchNamespaces"]}}
    assert set(got) == set(want), f"rules bound in {sorted(got)}, expected {sorted(want)}"
    problems = [d for where in want if (d := _diff(where, got[where], want[where]))]
    assert not problems, "\n".join(problems)


def test_peering_keepalives_only_into_our_peering_object() -> None:
    for values, kind in (({}, "ClusterRole"), ({"watchNamespaces": ["astro"]}, "Role")):
        objs = render(NIGHTSHIFT, {**values, "peering.name": "ours"})
        patch = [r for o in objs if o["kind"] == kind for r in o["rules"]
                 if r["apiGroups"] == ["kopf.dev"] and "patch" in r["verbs"]]
        assert patch and all(r.get("resourceNames") == ["ours"] for r in patch), patch
        peerings = [o for o in objs if o["apiVersion"] == "kopf.dev/v1"]
        assert [p["metadata"]["name"] for p in peerings] == ["ours"], peerings


def test_collaboration_grants_the_operator_only_named_secrets() -> None:
    objs = render(COLLABORATION, {"operator.secretNames": ["s3-creds"]},
                  release="astro", namespace="astro")
    bound = bound_rules(objs, OPERATOR_SA)
    assert set(bound) == {"astro"}, bound
    # Exactly the table's Secret rows (the ones the operator chart's rbac.readSecrets
    # would grant everywhere), here by name in this namespace only.
    secrets = {(g, r, v) for g, r, v, s in kubecalls.expected(
        all_namespaces=True, peering=False, read_secrets=True)} - {
        (g, r, v) for g, r, v, s in kubecalls.expected(
            all_namespaces=True, peering=False, read_secrets=False)}
    assert grants(bound["astro"]) == secrets
    assert all(r["resourceNames"] == ["s3-creds"] for r in bound["astro"])
    # No Secret names, no Role.
    assert bound_rules(render(COLLABORATION, release="astro", namespace="astro"),
                       OPERATOR_SA) == {}


def test_the_table_has_no_duplicates_and_known_conditions() -> None:
    keys = [(c.key, c.when) for c in kubecalls.CALLS]
    assert len(keys) == len(set(keys)), "a row appears twice in kubecalls.CALLS"
    for c in kubecalls.CALLS:
        assert c.scope in (kubecalls.CLUSTER, kubecalls.NAMESPACE), c
        assert c.when <= kubecalls.CONDITIONS, c
        assert c.caller, c
