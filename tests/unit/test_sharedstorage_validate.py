from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nightshift.sharedstorage.spec import SharedStorageSpec
from nightshift.sharedstorage.validate import ClusterFacts, effective_squid_cidrs, validate
from tests.bad_sharedstorages import BAD, FACTS, GOOD, good

INVALID = [b for b in BAD if b[2] == "invalid"]
# Every CEL case is caught here as well (an object admitted by an older CRD): by the
# model (an unknown type) or by validate.
CEL_ALSO_HERE = [b for b in BAD if b[2] == "cel"]


def problems_of(manifest: dict[str, Any], facts: ClusterFacts = FACTS) -> list[str]:
    spec = SharedStorageSpec.model_validate(manifest["spec"])
    return [str(p) for p in validate(spec, manifest["metadata"]["name"], facts)]


def test_table_is_well_formed() -> None:
    ids = [b[0] for b in BAD]
    assert len(ids) == len(set(ids))
    assert {b[2] for b in BAD} == {"cel", "invalid"}


@pytest.mark.parametrize("case", sorted(GOOD))
def test_good_storages_have_no_problems(case: str) -> None:
    assert problems_of(GOOD[case]) == []


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
    assert found, "admitted by an older CRD, this would be applied"


def test_without_facts_nothing_cluster_specific_is_claimed() -> None:
    # Unknown VirtualClusters and StorageClasses are not checked when not looked up...
    assert problems_of(good("nfs-dedicated", virtualCluster="elsewhere"), ClusterFacts(
        cluster_cidrs=["10.0.0.0/16"])) == []
    # ...but squids never serve beyond private space, known ranges or not.
    manifest = GOOD["cvmfs-eks"]
    public = {**manifest, "spec": {**manifest["spec"], "cvmfs": {
        **manifest["spec"]["cvmfs"], "squid": {
            **manifest["spec"]["cvmfs"]["squid"], "allowedCIDRs": ["52.0.0.0/8"]}}}}
    found = problems_of(public, ClusterFacts())
    assert any("52.0.0.0/8 is wider than private address space" in p for p in found), found
    assert problems_of(GOOD["cvmfs-eks"], ClusterFacts()) == []


def test_cluster_ranges_fill_an_empty_acl() -> None:
    spec = SharedStorageSpec.model_validate(GOOD["cvmfs-local"]["spec"])
    assert effective_squid_cidrs(spec, FACTS) == ["10.0.0.0/16", "100.64.0.0/16"]
    assert [str(p) for p in validate(spec, "software", ClusterFacts())] == [
        "spec.cvmfs.squid.allowedCIDRs: is empty and the operator does not know the "
        "cluster's pod and node ranges: list them, e.g. [10.0.0.0/16]"]


def test_no_default_storage_class() -> None:
    manifest = GOOD["nfs-dedicated"]
    spec = {**manifest["spec"], "nfs": {**manifest["spec"]["nfs"],
                                        "backing": {"pvc": {"size": "10Gi"}}}}
    facts = ClusterFacts(storage_classes={"gp3"}, default_storage_class=None)
    found = problems_of({**manifest, "spec": spec}, facts)
    assert found == ["spec.nfs.backing.pvc.storageClass: not set and the cluster has no "
                     "default StorageClass (have: gp3): name one"]
    assert problems_of({**manifest, "spec": spec}) == []  # FACTS has a default


def test_replica_rules_are_checked_here_as_in_cel() -> None:
    m = GOOD["gluster-distribute-replica"]
    spec = SharedStorageSpec.model_validate(m["spec"])
    three = spec.model_copy(update={"glusterfs": spec.glusterfs.model_copy(  # type: ignore[union-attr]
        update={"replica": 3, "servers": 2, "bricks_per_node": 3})})
    found = [str(p) for p in validate(three, "b", FACTS)]
    assert found == ["spec.glusterfs.replica: replica 3 needs at least 3 servers (copies on "
                     "one node protect nothing): raise servers to 3"]


def test_wrong_block_for_type_is_named() -> None:
    spec = SharedStorageSpec.model_validate({"type": "s3", "s3": {"bucket": "raw-data"},
                                             "cvmfs": GOOD["cvmfs-local"]["spec"]["cvmfs"]})
    assert [str(p) for p in validate(spec, "x", FACTS)] == [
        "spec.cvmfs: type is s3: remove spec.cvmfs (one type per SharedStorage; make "
        "another for this one)"]
