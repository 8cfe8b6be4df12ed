"""On AWS the pools' families and instance types are checked against the region's own
types (ec2:DescribeInstanceTypes, moto's copy of them here), as the KWOK catalog checks
them locally: before, a misspelled family rendered a NodePool that never launched a
node under a Ready VirtualCluster."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from nightshift.api import names
from nightshift.aws.clients import Ec2Access
from nightshift.aws.instancetypes import (
    FRESH_S,
    RETRY_S,
    TTL_S,
    CatalogCache,
    describe_catalog,
)
from nightshift.kube import Kube
from nightshift.virtualcluster.catalog import InstanceCatalog
from nightshift.virtualcluster.observe import CrdCache, Sources, observe
from nightshift.virtualcluster.plan import plan
from nightshift.virtualcluster.provider import CRD_EC2NODECLASS, CRD_NODEPOOL
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.validate import validate
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.vcfixtures import vc


def _ec2() -> Any:
    return boto3.client("ec2", region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test")


@pytest.fixture(scope="module")
def region() -> InstanceCatalog:
    """us-east-1's types as moto has them (about 1,400; paged, a few seconds: once)."""
    with mock_aws():
        return describe_catalog(_ec2())


def test_the_regions_types_become_the_catalog(region: InstanceCatalog) -> None:
    catalog = region
    c6i, c7g = catalog.types["c6i.large"], catalog.types["c7g.large"]
    assert (c6i.family, c6i.arch, c6i.cpu, c6i.memory_bytes) == ("c6i", "amd64", 2.0, 4 * 2**30)
    assert (c7g.family, c7g.arch) == ("c7g", "arm64")
    assert "c6l" not in catalog.families()


def test_a_misspelled_family_or_type_on_aws_is_invalid(region: InstanceCatalog) -> None:
    spec = VirtualClusterSpec.model_validate(vc(
        {"name": "w", "class": "compute", "families": ["c6l"]},
        {"name": "x", "class": "compute", "instanceTypes": ["c6i.humongous"]},
        {"name": "ok", "class": "compute", "families": ["c6i"],
         "instanceTypes": ["c6i.2xlarge"]})["spec"])
    said = [str(p) for p in validate(spec, "aws", region)]
    assert said == [
        "spec.pools[0].families[0]: unknown instance family 'c6l': check the spelling "
        "(e.g. c6i, r7g, m6id)",
        "spec.pools[1].instanceTypes[0]: unknown instance type 'c6i.humongous': use a name "
        "from the instance catalog, e.g. c6i.2xlarge"], said


def test_a_refused_describe_is_said_kept_a_while_then_tried_again() -> None:
    client = _ec2()
    stub = Stubber(client)
    now = [0.0]
    cache = CatalogCache(lambda: client, clock=lambda: now[0])
    stub.add_client_error("describe_instance_types", "UnauthorizedOperation",
                          "You are not authorized to perform this operation.")
    with stub:
        assert cache.get() is None
        assert cache.error.startswith("pools' families and instanceTypes not checked: ")
        assert "UnauthorizedOperation" in cache.error
        assert cache.error.endswith("grant the operator's role ec2:DescribeInstanceTypes")
        now[0] = RETRY_S - 1
        assert cache.get() is None  # not asked again yet (the stub has no more answers)
        now[0] = RETRY_S
        stub.add_response("describe_instance_types", {"InstanceTypes": [{
            "InstanceType": "c6i.large", "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
            "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 4096}}]})
        got = cache.get()
        assert got is not None and list(got.types) == ["c6i.large"] and cache.error == ""
        now[0] += TTL_S - 1
        assert cache.get() is got  # kept a day
        stub.assert_no_pending_responses()


def test_observe_passes_the_regions_types_on_aws() -> None:
    # One page of the answer: moto's whole region (about 1,400 types, 7 s) is read once,
    # by the module's `region` fixture; this is the path from observe to that call.
    class Installed(CrdCache):
        def installed(self, kube: Kube) -> frozenset[str]:
            return frozenset({CRD_NODEPOOL, CRD_EC2NODECLASS})

    client = _ec2()
    stub = Stubber(client)
    stub.add_response("describe_instance_types", {"InstanceTypes": [
        {"InstanceType": t, "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 4096},
         "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]}}
        for t in ("c6i.large", "m6i.large")]})
    obj = vc({"name": "w", "class": "compute"}, provider="aws")
    kube = RecordingKube([obj])
    with stub:
        got = observe(kube, Sources(Installed(), None, Ec2Access(lambda: client)),
                      obj["metadata"]["namespace"], obj["metadata"]["name"], datetime.now(UTC))
    stub.assert_no_pending_responses()
    assert got is not None and got.catalog is not None
    assert got.catalog.families() == ["c6i", "m6i"]


def test_a_name_the_catalog_lacks_reads_it_again_once_it_is_not_fresh() -> None:
    """A family AWS launched since the catalog was read is not refused as a misspelling
    for a day: a name it lacks reads it again, at most every FRESH_S."""
    def page(*types: str) -> dict[str, Any]:
        return {"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": 2},
                                   "MemoryInfo": {"SizeInMiB": 4096},
                                   "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]}}
                                  for t in types]}

    client = _ec2()
    stub = Stubber(client)
    now = [0.0]
    cache = CatalogCache(lambda: client, clock=lambda: now[0])
    stub.add_response("describe_instance_types", page("c6i.large"))
    stub.add_response("describe_instance_types", page("c6i.large", "c9i.large"))
    with stub:
        first = cache.get(["c6i"])
        assert first is not None and "c9i" not in first.families()
        now[0] = FRESH_S - 1
        assert cache.get(["c9i"]) is first  # fresh: the stub's second answer not asked
        now[0] = FRESH_S
        again = cache.get(["c9i.large"])
        assert again is not None and "c9i" in again.families()
    stub.assert_no_pending_responses()


def test_names_that_could_not_be_checked_are_said_in_ready() -> None:
    """Without ec2:DescribeInstanceTypes the pools are applied unchecked, and Ready says
    so with the grant (a misspelled family would otherwise show only as nodes that
    never come)."""
    class Installed(CrdCache):
        def installed(self, kube: Kube) -> frozenset[str]:
            return frozenset({CRD_NODEPOOL, CRD_EC2NODECLASS})

    client = _ec2()
    stub = Stubber(client)
    stub.add_client_error("describe_instance_types", "UnauthorizedOperation",
                          "You are not authorized to perform this operation.")
    obj = vc({"name": "w", "class": "compute", "families": ["c6i"]}, provider="aws")
    obj["metadata"]["finalizers"] = [names.FINALIZER_VIRTUAL_CLUSTER]
    with stub:
        got = observe(RecordingKube([obj]), Sources(Installed(), None, Ec2Access(lambda: client)),
                      obj["metadata"]["namespace"], obj["metadata"]["name"], datetime.now(UTC))
    assert got is not None and got.catalog is None
    status = plan(got).status
    assert status is not None
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "InstanceNamesNotChecked"), ready
    assert ready["message"].endswith("grant the operator's role ec2:DescribeInstanceTypes")
