"""A VirtualCluster's node cost: each NodeClaim's lifetime x its instance's price. Pure.

A NodeClaim is billed from its Launched condition (the instance exists) until it is
gone: Karpenter removes its finalizer only once the instance is terminated, so its
disappearance is the end of billing. Ended nodes leave no object behind, so the
status is the ledger: the nodes being billed (`open`, with the price when first seen)
and, per pool, what ended nodes cost. A node that ends while the operator is down is
charged until the first pass after it starts again (an over-estimate); one that both
launches and ends meanwhile is never seen (docs/cost.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nightshift.api import names
from nightshift.api.billing import Billing, billed_seconds, charge, seconds_between
from nightshift.api.conditions import rfc3339
from nightshift.virtualcluster.nodepools import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE

PriceKey = tuple[str, str]


def launched_at(claim: Mapping[str, Any]) -> str | None:
    for c in (claim.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Launched" and c.get("status") == "True":
            return str(c.get("lastTransitionTime")) if c.get("lastTransitionTime") else None
    return None


def billable(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ledger entry of a launched NodeClaim (price still to be filled in)."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    since, itype = launched_at(claim), labels.get(LABEL_INSTANCE_TYPE)
    if not since or not itype:
        return None
    return {"name": str(claim["metadata"]["name"]), "pool": labels.get(names.LABEL_POOL, ""),
            "instanceType": str(itype),
            "capacityType": str(labels.get(LABEL_CAPACITY_TYPE, "on-demand")),
            "since": since}


def price_keys(claims: Sequence[Mapping[str, Any]],
               prev: Mapping[str, Any] | None = None) -> set[PriceKey]:
    """The prices a pass needs: each launched NodeClaim's, and each unpriced open node's
    of the last status (it may have ended since: it is settled at the price found now)."""
    out = set()
    for claim in claims:
        entry = billable(claim)
        if entry:
            out.add((entry["instanceType"], entry["capacityType"]))
    for node in (prev or {}).get("open") or []:
        if node.get("hourlyUSD") is None:
            out.add((str(node.get("instanceType")), str(node.get("capacityType"))))
    return out


def _price(entry: Mapping[str, Any], prices: Mapping[PriceKey, float | None]) -> float | None:
    known = entry.get("hourlyUSD")
    if known is not None:
        return float(known)
    return prices.get((str(entry.get("instanceType")), str(entry.get("capacityType"))))


def node_cost(prev: Mapping[str, Any] | None, claims: Sequence[Mapping[str, Any]],
              prices: Mapping[PriceKey, float | None], billing: Billing, now: datetime,
              gone_at: Mapping[str, datetime] | None = None) -> dict[str, Any]:
    """status.cost from the last one and the NodeClaims seen now.

    `gone_at`: when the watch saw a NodeClaim go (more precise than this pass's time).
    """
    prev = prev or {}
    gone_at = gone_at or {}
    was_open = {str(n.get("name")): n for n in prev.get("open") or []}
    ended: dict[str, list[float]] = {
        str(p["name"]): [float(p.get("endedUSD", 0.0)), float(p.get("endedSeconds", 0.0))]
        for p in prev.get("pools") or []}
    still: list[dict[str, Any]] = []
    seen = set()
    for claim in claims:
        entry = billable(claim)
        if entry is None:
            continue
        seen.add(entry["name"])
        # Priced once the lookup works: the whole time open is charged at it. An unknown
        # price is no key at all, never null: the API server's merge patch drops nulls
        # inside lists, and the status would differ from the last one on every pass.
        source = was_open.get(entry["name"]) or entry
        kept = dict(source)
        kept.pop("hourlyUSD", None)
        hourly = _price(source, prices)
        if hourly is not None:
            kept["hourlyUSD"] = hourly
        still.append(kept)
    unpriced_ended = int(prev.get("unpricedEndedNodes") or 0)
    for name, node in was_open.items():
        if name in seen:
            continue
        end = min(gone_at.get(name, now), now)
        secs = seconds_between(node.get("since"), end)
        acc = ended.setdefault(str(node.get("pool", "")), [0.0, 0.0])
        hourly = _price(node, prices)
        if hourly:
            acc[0] += charge(secs, hourly, billing)
        elif hourly is None:
            unpriced_ended += 1  # its time is in nodeHours, never in totalUSD
        acc[1] += billed_seconds(secs, billing)
    pools: dict[str, list[float]] = {k: [v[0], v[1]] for k, v in ended.items()}
    for node in still:
        secs = seconds_between(node.get("since"), now)
        acc = pools.setdefault(str(node.get("pool", "")), [0.0, 0.0])
        acc[0] += charge(secs, node["hourlyUSD"], billing) if node.get("hourlyUSD") else 0.0
        acc[1] += billed_seconds(secs, billing)
    out: dict[str, Any] = {
        "billing": billing,
        "since": prev.get("since") or rfc3339(now),
        "observedAt": rfc3339(now),
        "totalUSD": round(sum(v[0] for v in pools.values()), 9),
        "nodeHours": round(sum(v[1] for v in pools.values()) / 3600.0, 4),
        "pools": [{"name": k, "totalUSD": round(v[0], 9),
                   "nodeHours": round(v[1] / 3600.0, 4),
                   "endedUSD": round(ended.get(k, [0.0, 0.0])[0], 9),
                   "endedSeconds": round(ended.get(k, [0.0, 0.0])[1], 3)}
                  for k, v in sorted(pools.items())],
        "open": sorted(still, key=lambda n: str(n["name"])),
    }
    unpriced = sum(1 for n in still if n.get("hourlyUSD") is None)
    if unpriced:
        out["unpricedNodes"] = unpriced
    if unpriced_ended:
        out["unpricedEndedNodes"] = unpriced_ended
    return out
