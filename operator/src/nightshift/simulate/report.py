"""What a simulation found: makespan, node mix, cost and utilisation. Pure.

Times are observed in real (compressed) seconds and reported in modelled ones (real /
scale). Cost is each node's modelled lifetime billed the model's way (per second with
the 60-s minimum, or per started hour) at its price; it is computed here rather than
read from the VirtualCluster's status because that one bills the compressed seconds,
where the 60-s minimum would dwarf every node's life. Utilisation is the run's own
`status.cost.usedUSD` (pod-seconds x requested share x price, the operator's
apportionment) over what the same nodes cost by the second: a ratio, the same in both
time frames.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nightshift.api.billing import Billing, charge
from nightshift.simulate.model import Model


@dataclass
class Node:
    """One NodeClaim of the simulation's VirtualCluster (times in real epoch seconds)."""
    name: str
    pool: str
    instance_type: str
    capacity_type: str
    launched: float
    gone: float | None = None
    hourly_usd: float | None = None
    on_demand_usd: float | None = None  # the same type on demand (for spotFraction)
    interrupted: bool = False
    registered: bool = False  # its Node joined (only then can it be interrupted)

    def seconds(self, end: float) -> float:
        return max(0.0, (self.gone if self.gone is not None else end) - self.launched)


@dataclass
class Outcome:
    """Everything a simulation observed about one variant."""
    variant: str
    created: float
    finished: float | None = None
    phase: str = "Pending"
    items: Mapping[str, int] = field(default_factory=dict)   # succeeded, failed, total
    nodes: Sequence[Node] = ()
    run_cost: Mapping[str, Any] = field(default_factory=dict)  # the run's status.cost
    interruptions: int = 0
    stage_seconds: Mapping[str, float] = field(default_factory=dict)  # real, first to last


@dataclass(frozen=True)
class Result:
    variant: str
    phase: str
    makespan_hours: float | None
    items_succeeded: int
    items_failed: int
    items_total: int
    nodes: int
    peak_nodes: int
    node_mix: tuple[tuple[str, int], ...]
    node_hours: float
    cost_usd: float
    unpriced_nodes: int
    utilisation: float | None
    interruptions: int
    billing: Billing
    stage_hours: tuple[tuple[str, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "phase": self.phase,
                "makespanHours": self.makespan_hours,
                "items": {"succeeded": self.items_succeeded, "failed": self.items_failed,
                          "total": self.items_total},
                "nodes": self.nodes, "peakNodes": self.peak_nodes,
                "nodeMix": dict(self.node_mix), "nodeHours": self.node_hours,
                "costUSD": self.cost_usd, "unpricedNodes": self.unpriced_nodes,
                "utilisation": self.utilisation, "interruptions": self.interruptions,
                "billing": self.billing, "stageHours": dict(self.stage_hours)}


def peak(nodes: Sequence[Node], end: float) -> int:
    edges = sorted([(n.launched, 1) for n in nodes]
                   + [(n.gone if n.gone is not None else end, -1) for n in nodes],
                   key=lambda e: (e[0], e[1]))
    level = best = 0
    for _, d in edges:
        level += d
        best = max(best, level)
    return best


def node_usd(n: Node, model: Model, seconds: float) -> float:
    """A node's bill for `seconds` of modelled life, the model's way. In the per-hour
    era EC2 did not charge the partial hour of a spot instance it interrupted."""
    hourly = float(n.hourly_usd or 0.0)
    if model.spot_fraction is not None and n.capacity_type == "spot" and n.on_demand_usd:
        hourly = n.on_demand_usd * model.spot_fraction
    if model.billing == "perHour" and n.interrupted:
        return math.floor(seconds / 3600.0) * hourly
    return charge(seconds, hourly, model.billing)


def result(o: Outcome, model: Model, end: float) -> Result:
    """`end`: when the simulation stopped watching (nodes still up are cut there)."""
    stop = o.finished if o.finished is not None else end
    priced = [n for n in o.nodes if n.hourly_usd is not None]
    cost = sum(node_usd(n, model, model.modelled(n.seconds(stop))) for n in priced)
    raw_usd = sum(n.seconds(stop) * float(n.hourly_usd or 0.0) / 3600.0 for n in priced)
    used = o.run_cost.get("usedUSD")
    mix = Counter(f"{n.pool}: {n.instance_type} {n.capacity_type}" for n in o.nodes)
    return Result(
        variant=o.variant, phase=o.phase,
        makespan_hours=(None if o.finished is None
                        else model.modelled(o.finished - o.created) / 3600.0),
        items_succeeded=int(o.items.get("succeeded", 0)),
        items_failed=int(o.items.get("failed", 0)),
        items_total=int(o.items.get("total", 0)),
        nodes=len(o.nodes), peak_nodes=peak(o.nodes, stop),
        node_mix=tuple(sorted(mix.items())),
        node_hours=sum(model.modelled(n.seconds(stop)) for n in o.nodes) / 3600.0,
        cost_usd=cost, unpriced_nodes=len(o.nodes) - len(priced),
        utilisation=(min(1.0, float(used) / raw_usd) if used is not None and raw_usd > 0
                     else None),
        interruptions=o.interruptions, billing=model.billing,
        stage_hours=tuple((k, model.modelled(v) / 3600.0) for k, v in o.stage_seconds.items()))


def run_items(status: Mapping[str, Any]) -> dict[str, int]:
    """Item counts summed over the run's stages (status.stages[])."""
    out = {"succeeded": 0, "failed": 0, "total": 0}
    for s in status.get("stages") or []:
        for k in out:
            out[k] += int(s.get(k) or 0)
    return out


def stage_seconds(status: Mapping[str, Any], epoch: Callable[[Any], float | None]
                  ) -> dict[str, float]:
    """Each finished stage's real seconds, from its first Job's start to its end."""
    out = {}
    for s in status.get("stages") or []:
        start, end = epoch(s.get("startTime")), epoch(s.get("completionTime"))
        if start is not None and end is not None:
            out[str(s.get("name"))] = end - start
    return out


def _hours(h: float | None) -> str:
    return "-" if h is None else f"{h:.2f}"


def table_rows(results: Sequence[Result]) -> list[list[str]]:
    """Header and rows of the comparison table."""
    head = ["VARIANT", "RESULT", "MAKESPAN h", "ITEMS", "NODES (PEAK)", "NODE h",
            "COST USD", "UTILISATION", "INTERRUPTIONS", "STAGE h", "NODE MIX"]
    rows = [head]
    for r in results:
        mix = ", ".join(f"{n}x {k}" for k, n in r.node_mix)
        cost = f"{r.cost_usd:.2f}" + (f" (+{r.unpriced_nodes} unpriced)"
                                      if r.unpriced_nodes else "")
        rows.append([r.variant, r.phase, _hours(r.makespan_hours),
                     f"{r.items_succeeded}/{r.items_total}"
                     + (f" ({r.items_failed} failed)" if r.items_failed else ""),
                     f"{r.nodes} ({r.peak_nodes})", f"{r.node_hours:.1f}", cost,
                     "-" if r.utilisation is None else f"{100 * r.utilisation:.0f}%",
                     str(r.interruptions),
                     " ".join(f"{k}={v:.1f}" for k, v in r.stage_hours) or "-", mix])
    return rows
