"""Hourly instance prices: from the KWOK catalog locally, from AWS on EKS.

Status shows a pool's cost as the sum of its nodes' prices. Locally the KWOK catalog
(the file Karpenter's KWOK provider reads, INSTANCE_TYPES_FILE_PATH) carries spot and
on-demand prices. On AWS, on-demand prices come from the Pricing API and spot prices
from DescribeSpotPriceHistory; both change slowly, so answers (misses included) are
cached for a TTL and a failing API costs one call per TTL, not one per node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nightshift.aws import AwsError, aws_errors
from nightshift.virtualcluster.catalog import InstanceCatalog, parse_kwok_catalog

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_pricing import PricingClient

PriceFn = Callable[[str, str], float | None]

# The Pricing API lives in a few regions only; us-east-1 answers for every region.
PRICING_REGION = "us-east-1"
DEFAULT_TTL_SECONDS = 3600.0
FAILURE_TTL_SECONDS = 60.0
# The code of the AwsError a lookup records when AWS answered with no price.
NO_PRICE = "NoPrice"


def load_kwok_catalog(path: str | Path) -> InstanceCatalog:
    """The KWOK provider's instance-type file, e.g. karpenter's
    kwok/examples/aws_instance_types.json."""
    with open(path, encoding="utf-8") as f:
        return parse_kwok_catalog(json.load(f))


def catalog_prices(catalog: InstanceCatalog) -> PriceFn:
    """(instance type, capacity type) -> USD/hour, the cheapest zone's offering."""
    return catalog.price


class AwsPrices:
    """A PriceFn backed by AWS, cached. Never raises: a failure leaves the price
    unknown (None), and its error stays in `errors` under the (instance type, capacity
    type) it was for, until a lookup succeeds, for the reconciler to report."""

    def __init__(
        self,
        region: str,
        pricing: PricingClient,
        ec2: EC2Client,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.region = region
        self._pricing = pricing
        self._ec2 = ec2
        self._ttl = ttl_seconds
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, float | None]] = {}
        # Per (instance type, capacity type): the error of its last lookup, while it fails.
        self.errors: dict[tuple[str, str], AwsError] = {}

    def __call__(self, instance_type: str, capacity_type: str) -> float | None:
        key = (instance_type, capacity_type)
        hit = self._cache.get(key)
        now = self._clock()
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            if capacity_type == "spot":
                value = self.spot(instance_type)
            else:
                value = self.on_demand(instance_type)
            if value is None:
                # An empty answer is a miss like a refusal: said, and asked again soon
                # (a spot history can be empty for a moment), not kept for an hour.
                raise AwsError(
                    "ec2:DescribeSpotPriceHistory" if capacity_type == "spot"
                    else "pricing:GetProducts", NO_PRICE,
                    f"no Linux {capacity_type} price for {instance_type} in {self.region}")
            self.errors.pop(key, None)
        except AwsError as e:
            self.errors[key] = e
            # A failure is looked up again soon: a permission granted shows within a minute.
            self._cache[key] = (now + min(self._ttl, FAILURE_TTL_SECONDS), None)
            return None
        self._cache[key] = (now + self._ttl, value)
        return value

    def on_demand(self, instance_type: str) -> float | None:
        filters = {
            "instanceType": instance_type,
            "regionCode": self.region,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
            "licenseModel": "No License required",
        }
        with aws_errors("pricing:GetProducts"):
            resp = self._pricing.get_products(
                ServiceCode="AmazonEC2",
                Filters=[
                    {"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()
                ],
                MaxResults=10,
            )
        for raw in resp.get("PriceList", []):
            price = _on_demand_usd(json.loads(raw) if isinstance(raw, str) else raw)
            if price is not None:
                return price
        return None

    def spot(self, instance_type: str) -> float | None:
        """Mean over the zones of each zone's latest spot price."""
        with aws_errors("ec2:DescribeSpotPriceHistory"):
            resp = self._ec2.describe_spot_price_history(
                InstanceTypes=[instance_type],  # type: ignore[list-item]
                ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
                StartTime=datetime.now(UTC),
            )
        latest: dict[str, tuple[datetime, float]] = {}
        for entry in resp.get("SpotPriceHistory", []):
            zone = str(entry.get("AvailabilityZone", ""))
            stamp = entry.get("Timestamp") or datetime.min.replace(tzinfo=UTC)
            price = float(entry.get("SpotPrice", "nan"))
            if zone not in latest or stamp > latest[zone][0]:
                latest[zone] = (stamp, price)
        if not latest:
            return None
        return sum(p for _, p in latest.values()) / len(latest)


def _on_demand_usd(product: dict[str, object]) -> float | None:
    terms = product.get("terms")
    on_demand = terms.get("OnDemand") if isinstance(terms, dict) else None
    if not isinstance(on_demand, dict):
        return None
    for term in on_demand.values():
        for dim in (term.get("priceDimensions") or {}).values():
            usd = (dim.get("pricePerUnit") or {}).get("USD")
            if usd is not None and float(usd) > 0:
                return float(usd)
    return None
