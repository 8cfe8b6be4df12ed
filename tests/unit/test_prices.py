from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from nightshift.aws.clients import Ec2Access
from nightshift.aws.prices import AwsPrices, catalog_prices, load_kwok_catalog
from nightshift.virtualcluster.observe import CrdCache, Sources, load_catalog
from tests.unit.vcfixtures import CATALOG_ENTRIES


def kwok_catalog_file() -> Path:
    """Karpenter's upstream example catalog at the version hack/versions.env pins (the bed
    feeds its Linux entries to the KWOK provider and the operator)."""
    from nightshift_localcluster.paths import Layout

    return Layout.discover().kwok_example_catalog


def test_kwok_catalog_prices(tmp_path: Path) -> None:
    path = tmp_path / "types.json"
    path.write_text(json.dumps(CATALOG_ENTRIES))
    price = catalog_prices(load_kwok_catalog(path))
    assert price("c6i.large", "spot") == 0.0595
    assert price("c6i.large", "on-demand") == 0.085
    assert price("nope.large", "spot") is None


def test_real_kwok_catalog() -> None:
    path = kwok_catalog_file()
    if not path.exists():
        pytest.skip(f"{path} missing: the karpenter module is not in the Go module cache "
                    "(make upstream fetches it)")
    cat = load_kwok_catalog(path)
    assert len(cat.types) > 800  # one entry per type and OS; Linux kept
    t = cat.types["c6i.large"]
    assert (t.arch, t.cpu, t.prices["on-demand"]) == ("amd64", 2.0, 0.085)
    assert t.prices["spot"] < t.prices["on-demand"]
    assert "r6id" in cat.families_for_class("memory", local_nvme=True)
    assert "r6i" not in cat.families_for_class("memory", local_nvme=True)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def product(usd: str) -> str:
    return json.dumps({"terms": {"OnDemand": {"X.Y": {"priceDimensions": {
        "X.Y.Z": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}}})


def prices(pricing: Any, clock: Clock) -> AwsPrices:
    return AwsPrices("us-west-2", pricing, boto3.client("ec2", region_name="us-west-2"),
                     ttl_seconds=60, clock=clock)


@mock_aws
def test_spot_from_ec2_and_cached() -> None:
    pricing = boto3.client("pricing", region_name="us-east-1")
    clock = Clock()
    p = prices(pricing, clock)
    # moto answers DescribeSpotPriceHistory with its fixed price per zone.
    spot = p("c6i.large", "spot")
    assert spot is not None and spot > 0
    assert p("c6i.large", "spot") == spot


@mock_aws
def test_on_demand_from_pricing_api_cached_with_ttl() -> None:
    pricing = boto3.client("pricing", region_name="us-east-1")
    clock = Clock()
    with Stubber(pricing) as stub:
        stub.add_response("get_products", {"PriceList": [product("0.0850000000")]},
                          {"ServiceCode": "AmazonEC2", "Filters": ANY, "MaxResults": 10})
        p = prices(pricing, clock)
        assert p("c6i.large", "on-demand") == 0.085
        assert p("c6i.large", "on-demand") == 0.085  # cached: no second call stubbed
        clock.t = 61
        stub.add_response("get_products", {"PriceList": [product("0.09")]})
        assert p("c6i.large", "on-demand") == 0.09
        stub.assert_no_pending_responses()


@mock_aws
def test_aws_failure_leaves_price_unknown_and_reports() -> None:
    pricing = boto3.client("pricing", region_name="us-east-1")
    with Stubber(pricing) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "no pricing:GetProducts")
        p = prices(pricing, Clock())
        assert p("c6i.large", "on-demand") is None
        assert p.errors[("c6i.large", "on-demand")].code == "AccessDeniedException"
        # The miss is cached too: a failing API costs one call per TTL.
        assert p("c6i.large", "on-demand") is None


@mock_aws
def test_ec2_access_says_why_prices_are_unknown_and_retries_within_a_minute() -> None:
    pricing = boto3.client("pricing", region_name="us-east-1")
    access, clock = Ec2Access(), Clock()
    c6i, m6i = ("c6i.large", "on-demand"), ("m6i.large", "on-demand")
    with Stubber(pricing) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "no pricing:GetProducts")
        access._prices = prices(pricing, clock)
        assert access.prices()(*c6i) is None
        said = access.price_problem([c6i])
        assert said == ("AWS price lookup failed: pricing:GetProducts: AccessDeniedException: "
                        "no pricing:GetProducts; grant the operator's role pricing:GetProducts "
                        "and ec2:DescribeSpotPriceHistory")
        stub.add_response("get_products", {"PriceList": [product("0.0850000000")]})
        assert access.prices()(*m6i) == 0.085
        # Another type's success says nothing of this one's failure.
        assert access.price_problem([c6i]) == said and access.price_problem([m6i]) == ""
        assert access.prices()(*c6i) is None  # the failure is cached, briefly
        clock.t = 61
        stub.add_response("get_products", {"PriceList": [product("0.17")]})
        assert access.prices()(*c6i) == 0.17  # the permission granted: priced
        assert access.price_problem([c6i]) == ""
        stub.assert_no_pending_responses()


def test_ec2_access_without_credentials_says_so() -> None:
    def no_client() -> Any:
        raise RuntimeError("You must specify a region.")

    access = Ec2Access(factory=no_client)
    assert access.prices()("c6i.large", "on-demand") is None
    assert access.price_problem([("c6i.large", "on-demand")]) == (
        "AWS prices unavailable: CreateClient: NoClient: You must specify a region.; set "
        "AWS_REGION and the operator's AWS credentials (IRSA or Pod Identity)")


@mock_aws
def test_a_lookup_that_succeeds_again_clears_its_error() -> None:
    pricing = boto3.client("pricing", region_name="us-east-1")
    clock = Clock()
    with Stubber(pricing) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "no pricing:GetProducts")
        p = prices(pricing, clock)
        assert p("c6i.large", "on-demand") is None
        assert ("c6i.large", "on-demand") in p.errors
        # The permission granted: the failure's shorter TTL passes, the lookup succeeds.
        clock.t = 61
        stub.add_response("get_products", {"PriceList": [product("0.085")]})
        assert p("c6i.large", "on-demand") == 0.085
        assert p.errors == {}
        stub.assert_no_pending_responses()


def test_an_unreadable_catalog_is_said_on_the_status_not_only_logged(tmp_path: Path) -> None:
    path = tmp_path / "instance-types.json"
    path.write_text("{not json")
    catalog, why = load_catalog(str(path))
    assert catalog is None
    assert why.startswith(f"instance catalog {path} (NIGHTSHIFT_INSTANCE_CATALOG) is "
                          "unreadable: ")
    assert why.endswith("point the chart value config.instanceCatalog at the KWOK "
                        "provider's instance-type file and restart the operator")
    sources = Sources(CrdCache(), catalog, cast(Any, None), catalog_problem=why)
    assert sources.price_problem("kwok", [("c6i.large", "spot")]) == why
    assert load_catalog("") == (None, "")
    assert Sources(CrdCache(), None, cast(Any, None)).price_problem(
        "kwok", [("c6i.large", "spot")]).startswith("no instance catalog: set ")


@mock_aws
def test_an_empty_price_answer_is_said_and_asked_again_within_a_minute() -> None:
    pricing = boto3.client("pricing", region_name="us-east-1")
    access, clock = Ec2Access(), Clock()
    key = ("c9z.large", "on-demand")
    with Stubber(pricing) as stub:
        stub.add_response("get_products", {"PriceList": []})
        access._prices = AwsPrices("us-west-2", pricing,
                                   boto3.client("ec2", region_name="us-west-2"),
                                   ttl_seconds=3600, clock=clock)
        assert access.prices()(*key) is None
        assert access.price_problem([key]) == (
            "AWS lists no price: no Linux on-demand price for c9z.large in us-west-2 (the "
            "type or region is not in the Pricing API or the spot history; its cost is "
            "not counted)")
        clock.t = 61  # not the hour a found price is kept
        stub.add_response("get_products", {"PriceList": [product("0.2")]})
        assert access.prices()(*key) == 0.2
        assert access.price_problem([key]) == ""
        stub.assert_no_pending_responses()
