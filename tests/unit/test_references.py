"""A run's VirtualCluster and pools checked (issue 12: never a silent Pending): a missing
VirtualCluster holds every stage, a missing pool its stage, each with the field and the
fix on the Progressing condition; a stage without pool gets the first pool."""

from __future__ import annotations

from typing import Any

from nightshift.pipelinerun import references
from nightshift.pipelinerun.spec import PipelineRunSpec


def spec(**kw: Any) -> PipelineRunSpec:
    stages = [{"name": "split", "image": "busybox", "pool": "general",
               "forEach": {"items": ["a"]}, "steps": [{"name": "s", "command": ["true"]}]},
              {"name": "invert", "image": "busybox", "dependsOn": ["split"],
               "forEach": {"items": ["a"]}, "steps": [{"name": "s", "command": ["true"]}]},
              {"name": "concat", "image": "busybox", "pool": "gpu", "dependsOn": ["invert"],
               "forEach": {"items": ["a"]}, "steps": [{"name": "s", "command": ["true"]}]}]
    return PipelineRunSpec.model_validate({"virtualCluster": "chiles", "stages": stages, **kw})


VC = {"spec": {"pools": [{"name": "compute"}, {"name": "general"}]}}


def test_a_missing_virtual_cluster_holds_every_stage_naming_the_field() -> None:
    r = references.check(spec(), "radio", {"chiles": None})
    assert r.waiting_stages == {"split", "invert", "concat"}
    (msg,) = r.waiting
    assert msg.startswith("spec.virtualCluster: no VirtualCluster 'chiles' in namespace radio")
    assert "kubectl get virtualclusters -n radio" in msg


def test_a_pool_not_in_the_virtual_cluster_holds_its_stage() -> None:
    r = references.check(spec(), "radio", {"chiles": VC})
    assert r.waiting_stages == {"concat"}
    (msg,) = r.waiting
    assert msg.startswith("spec.stages[2].pool: VirtualCluster 'chiles' has no pool 'gpu' "
                          "(its pools: compute, general)")


def test_a_stage_without_pool_runs_on_the_first_pool() -> None:
    r = references.check(spec(), "radio", {"chiles": VC})
    assert [st.pool for st in r.spec.stages] == ["general", "compute", "gpu"]


def test_nothing_checked_without_a_virtual_cluster_or_unread() -> None:
    plain = PipelineRunSpec.model_validate({"stages": spec().model_dump(by_alias=True)["stages"]})
    assert references.check(plain, "radio", {}).waiting == []
    assert references.check(spec(), "radio", {}).waiting == []


def test_a_missing_service_account_holds_its_stage() -> None:
    s = spec()
    stages = [st.model_copy(update={"service_account_name": "pipeline"}) if st.name == "invert"
              else st for st in s.stages]
    s = s.model_copy(update={"stages": stages})
    assert references.service_accounts(s) == ["pipeline"]
    r = references.check(s, "radio", {"chiles": VC}, {"pipeline": False})
    assert r.waiting_stages == {"invert", "concat"}
    assert r.reason == references.REASON  # the pool first: it is listed first
    assert any(m.startswith("spec.stages[1].serviceAccountName: no ServiceAccount 'pipeline'")
               and "kubectl create serviceaccount pipeline -n radio" in m for m in r.waiting)
    only = references.check(s.model_copy(update={"virtual_cluster": None}), "radio", {},
                            {"pipeline": False})
    assert only.waiting_stages == {"invert"} and only.reason == references.REASON_ACCOUNT
    assert references.check(s, "radio", {"chiles": VC}, {"pipeline": True}).waiting_stages \
        == {"concat"}
