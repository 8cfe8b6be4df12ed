"""boto3 clients the operator builds, and the AWS price source: built lazily, once per
process, and never raising at construction (no region or credentials leaves prices
unknown and turns placement-group steps into a condition naming the fix)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

import boto3

from nightshift.aws import AwsError
from nightshift.aws.instancetypes import CatalogCache
from nightshift.aws.prices import NO_PRICE, PRICING_REGION, AwsPrices, PriceFn
from nightshift.virtualcluster.catalog import InstanceCatalog

log = logging.getLogger("nightshift")


def unknown_price(_type: str, _capacity: str) -> float | None:
    return None


class Ec2Access:
    """The operator's EC2 client and its price source. `factory` replaces boto3 in
    tests (a Stubber-backed client)."""

    def __init__(self, factory: Callable[[], Any] | None = None) -> None:
        self._factory = factory
        self._ec2: Any = None
        self._prices: PriceFn | None = None
        self.types = CatalogCache(self.client)
        # Why there is no price source at all (no region or credentials), for the status.
        self.prices_error = ""

    def client(self) -> Any:
        """The EC2 client; AwsError("NoClient") when there is no region or credentials."""
        if self._ec2 is None:
            try:
                self._ec2 = self._factory() if self._factory else boto3.client("ec2")
            except Exception as e:  # botocore's NoRegionError and friends
                raise AwsError("CreateClient", "NoClient", str(e)) from e
        return self._ec2

    def catalog(self, names: Iterable[str] = ()) -> InstanceCatalog | None:
        """The region's instance types (cached a day, read again sooner for a name it
        lacks); None while they cannot be read."""
        return self.types.get(names)

    def prices(self) -> PriceFn:
        """On-demand (Pricing API) and spot (price history) USD/hour, cached."""
        if self._prices is None:
            try:
                ec2 = self.client()
                region = ec2.meta.region_name or os.environ.get("AWS_REGION", "us-east-1")
                pricing = boto3.client("pricing", region_name=PRICING_REGION)
                self._prices = AwsPrices(region, pricing, ec2, ttl_seconds=3600)
            except Exception as e:  # no region or credentials: prices stay unknown
                self.prices_error = (f"AWS prices unavailable: {e}; set AWS_REGION and the "
                                     "operator's AWS credentials (IRSA or Pod Identity)")
                log.warning("%s", self.prices_error)
                self._prices = unknown_price
        return self._prices

    def price_problem(self, keys: Iterable[tuple[str, str]]) -> str:
        """Why the prices of `keys` (instance type, capacity type) are unknown, with the
        fix; "" when none of their lookups failed or came back empty."""
        if self.prices_error:
            return self.prices_error
        if isinstance(self._prices, AwsPrices):
            for key in keys:
                if (e := self._prices.errors.get(key)) and e.code == NO_PRICE:
                    return (f"AWS lists no price: {e.message} (the type or region is not "
                            "in the Pricing API or the spot history; its cost is not "
                            "counted)")
                if e:
                    return (f"AWS price lookup failed: {e}; grant the operator's role "
                            "pricing:GetProducts and ec2:DescribeSpotPriceHistory")
        return ""
