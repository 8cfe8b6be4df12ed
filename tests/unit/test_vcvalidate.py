from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nightshift.api.problems import summarize
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.validate import validate
from tests.bad_virtualclusters import BAD
from tests.unit.vcfixtures import POOLS, catalog, vc

INVALID = [b for b in BAD if b[2] == "invalid"]
# CEL cases the operator catches as well (an object admitted by an older CRD); the
# pattern and label ones only the API server checks (an older object's that Karpenter
# refuses is a NotReady naming the pool fields: virtualcluster/reconcile._apply).
CEL_ALSO_HERE = [b for b in BAD if b[2] == "cel" and b[0] not in (
    "pool-name-not-dns", "reserved-label", "karpenter-label", "hostname-label",
    "label-key-format", "label-value-format", "taint-key-format")]


def problems_of(manifest: dict[str, Any], provider: str = "aws") -> list[str]:
    spec = VirtualClusterSpec.model_validate(manifest["spec"])
    return [str(p) for p in validate(spec, spec.provider if spec.provider != "auto"
                                     else provider, catalog())]


def test_table_is_well_formed() -> None:
    ids = [b[0] for b in BAD]
    assert len(ids) == len(set(ids))
    assert {b[2] for b in BAD} == {"cel", "invalid"}


@pytest.mark.parametrize(("case_id", "manifest", "kind", "text"), INVALID,
                         ids=[b[0] for b in INVALID])
def test_invalid_cases_name_the_field(case_id: str, manifest: dict[str, Any], kind: str,
                                      text: str) -> None:
    found = problems_of(manifest)
    assert any(text in p for p in found), found


@pytest.mark.parametrize(("case_id", "manifest", "kind", "text"), CEL_ALSO_HERE,
                         ids=[b[0] for b in CEL_ALSO_HERE])
def test_cel_cases_are_refused_here_too(case_id: str, manifest: dict[str, Any], kind: str,
                                        text: str) -> None:
    try:
        found = problems_of(manifest)
    except ValidationError:
        return
    assert found


def test_good_virtualcluster_has_no_problems() -> None:
    manifest = vc(*POOLS.values())
    assert problems_of(manifest) == []
    assert problems_of(manifest, "kwok") == []


def test_kwok_needs_no_aws_settings() -> None:
    manifest = vc(POOLS["spot-compute"], nodeClass={})
    assert problems_of(manifest, "kwok") == []
    assert any("spec.nodeClass.role" in p for p in problems_of(manifest, "aws"))


def test_summary_is_bounded() -> None:
    manifest = vc(*[{"name": f"p{i}", "class": "memory", "families": ["c6i"]} for i in range(9)])
    spec = VirtualClusterSpec.model_validate(manifest["spec"])
    text = summarize(validate(spec, "aws"))
    assert text.startswith("spec.pools[0].families[0]:") and text.endswith("and 4 more")


@pytest.mark.parametrize(("path", "provider"), [
    ("examples/virtualcluster-local.yaml", "kwok"), ("examples/virtualcluster-eks.yaml", "aws")])
def test_examples_are_valid(path: str, provider: str) -> None:
    from pathlib import Path

    import yaml

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / path).read_text())
    spec = VirtualClusterSpec.model_validate(doc["spec"])
    assert [str(p) for p in validate(spec, provider)] == []


@pytest.mark.parametrize(("node_class", "said"), [
    ({"amiFamily": "AL2023"}, None),  # the default alias's own family: harmless
    ({"amiFamily": "Bottlerocket", "amiAlias": "bottlerocket@latest"}, None),
    ({"amiFamily": "Bottlerocket"}, "set amiAlias: bottlerocket@latest"),
    ({"amiFamily": "Custom"}, "a Custom family needs amiSelectorTerms naming the AMIs"),
])
def test_an_ami_family_the_alias_does_not_give_is_invalid(node_class: dict[str, Any],
                                                          said: str | None) -> None:
    from tests.unit.vcfixtures import AWS_NODECLASS

    found = [p for p in problems_of(vc({"name": "w", "class": "compute"},
                                       nodeClass={**AWS_NODECLASS, **node_class}))
             if p.startswith("spec.nodeClass.amiFamily")]
    assert (found == []) if said is None else (len(found) == 1 and said in found[0]), found
