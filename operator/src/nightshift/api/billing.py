"""What a node's time costs, and a VirtualCluster's node cost at any instant. Pure.

EC2 bills Linux instances per second with a 60-second minimum; until 2017 it billed
every started hour, which is what the seed studies paid. Both are offered so a run can
be priced the way its paper was (`spec.billing` of a VirtualCluster).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from nightshift.api.conditions import parse_rfc3339

Billing = Literal["perSecond", "perHour"]
BILLINGS: tuple[Billing, ...] = ("perSecond", "perHour")
DEFAULT_BILLING: Billing = "perSecond"
MINIMUM_SECONDS = 60.0


def billed_seconds(seconds: float, billing: Billing) -> float:
    """The seconds an instance that ran `seconds` is charged for."""
    seconds = max(0.0, seconds)
    if billing == "perHour":
        return 3600.0 * max(1, math.ceil(seconds / 3600.0))
    return max(MINIMUM_SECONDS, seconds)


def charge(seconds: float, hourly_usd: float, billing: Billing) -> float:
    return billed_seconds(seconds, billing) * hourly_usd / 3600.0


def seconds_between(start: str | None, end: datetime) -> float:
    t = parse_rfc3339(start)
    return 0.0 if t is None else max(0.0, (end - t).total_seconds())


def node_usd_at(vc_status: Mapping[str, Any] | None, now: datetime) -> float | None:
    """A VirtualCluster's node cost so far as of `now`: the total its last pass wrote,
    plus what the nodes it saw running have cost since (they are billed until the
    VirtualCluster's next pass sees them go). None when it records no cost."""
    cost = (vc_status or {}).get("cost")
    if not isinstance(cost, Mapping) or "totalUSD" not in cost:
        return None
    billing: Billing = cost.get("billing") or DEFAULT_BILLING
    total = float(cost["totalUSD"])
    observed = parse_rfc3339(cost.get("observedAt"))
    if observed is None or now <= observed:
        return total
    for node in cost.get("open") or []:
        hourly = node.get("hourlyUSD")
        if hourly is None:
            continue
        then = seconds_between(node.get("since"), observed)
        later = seconds_between(node.get("since"), now)
        total += charge(later, hourly, billing) - charge(then, hourly, billing)
    return total
