"""Pods of a stalled stage that Karpenter launches no node for, and why. Pure.

For a pod no node takes, the scheduler says only that none fits now ("0/5 nodes are
available: ..."). On a VirtualCluster's pool, where Karpenter launches nodes for such
pods, that reads as "nodes may still be launching". Karpenter says in the pod's events
when it will not launch one: no instance type the pool allows has the CPU or memory the
pod asks for, the pool's limits are reached, or no offering (zone, capacity type) is
left. When a stalled stage of a run on a VirtualCluster has such pods, the I/O layer
reads the first one's events (one LIST by its uid, on the stalled reads' schedule).
When Karpenter's newest there is a FailedScheduling, not a later Nominated, it found no
node to launch for the pod: the stage's line says so, with what the pod asks for and
where to look.

Karpenter's own reason follows, without a NodePool's requirement list. Its message
joins, with "; ", one error per NodePool of the cluster, and most do not name theirs
(`scheduler.go` combines them; v1.14.1). Those of other NodePools are left out: a taint
the pod does not tolerate (it tolerates its own pool's), requirements that differ on the
VirtualCluster, its namespace or the pool label (its own pool's NodePools carry all
three), and a limit error naming another NodePool. What is left is its own pool's.
Where the pods' affinity also has the term for hand-labeled nodes (static mode),
Karpenter reports that term's mismatch on the VirtualCluster label, which says nothing
of the pool and goes the same way. The line itself names the pool's sizes and limits
either way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from nightshift.api import names, refusals
from nightshift.pipelinerun import podvalues
from nightshift.pipelinerun.spec import Stage
from nightshift.pipelinerun.stalled import MESSAGE_CHARS, WAITING_FOR_NODES, fit, stall_head
from nightshift.virtualcluster.nodepools import HALF_ON_DEMAND, HALF_SPOT
from nightshift.virtualcluster.objectnames import nodepool_name

FAILED_SCHEDULING = "FailedScheduling"
NOMINATED = "Nominated"  # Karpenter's: a node is launching (or there) for the pod
KARPENTER = "karpenter"
_PREFIX = "Failed to schedule pod, "  # Karpenter's; the scheduler's start "0/N nodes"
# What changes nothing for the reader and can be long: the daemonsets' overhead, and the
# NodePool's requirements (every allowed family, size and zone), cut before resources=.
_OVERHEAD = re.compile(r"daemonset overhead=\{[^}]*\}, ")
_NODEPOOL = re.compile(r'^incompatible with nodepool "[^"]*", ')  # the fix names the pool
_REQUIREMENTS = re.compile(r", requirements=.*?(?=, resources=\{|$)")
# Errors of NodePools other than the pod's own pool's (see the module's docstring).
_OWN_KEYS = (names.LABEL_VIRTUAL_CLUSTER, names.LABEL_VIRTUAL_CLUSTER_NAMESPACE,
             names.LABEL_POOL)
_KEYS = "|".join(re.escape(k) for k in _OWN_KEYS)
# Karpenter's two shapes for a requirement a NodePool cannot meet (scheduling/
# requirements.go): a key whose values differ, and a key the NodePool does not have.
_OTHER_NODEPOOL = re.compile(
    rf'^(did not tolerate taint\b|incompatible requirements, (key ({_KEYS}),|'
    rf'label "({_KEYS})" does not have known values))')
_NAMED = re.compile(r"\(NodePool=([^)]*)\)")
# The halves a pool's NodePools may have (virtualcluster/nodepools.halves): none, or both.
_HALVES = ("", HALF_SPOT, HALF_ON_DEMAND)


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """The scheduler has tried the pod and found no node (PodScheduled False)."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def first(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((p for p in pods if unschedulable(p)), None)


def karpenters(event: Mapping[str, Any]) -> bool:
    """Karpenter's FailedScheduling or Nominated, not the scheduler's FailedScheduling
    (the same reason from another source)."""
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
    said = str(event.get("message") or "")
    if event.get("reason") == NOMINATED:
        return source == KARPENTER or said.startswith("Pod should schedule on")
    return event.get("reason") == FAILED_SCHEDULING and (
        source == KARPENTER or said.startswith(_PREFIX))


def own_nodepools(namespace: str, virtual_cluster: str, pool: str | None) -> frozenset[str]:
    """The names the pool's NodePools may have (none known without the pool)."""
    if not pool:
        return frozenset()
    return frozenset(nodepool_name(namespace, virtual_cluster, pool, h) for h in _HALVES)


def words(said: str, own: frozenset[str] = frozenset()) -> str:
    """Karpenter's message, short: why its own pool's NodePools (`own`, where known) took
    no node for the pod, and what the pod asks for; "" when only other NodePools'
    errors are there."""
    said = " ".join(refusals.clean(said).split()).removeprefix(_PREFIX)
    kept: list[str] = []
    for part in said.split("; "):
        named = _NAMED.search(part)
        if _OTHER_NODEPOOL.match(part) or (named and own and named.group(1) not in own):
            continue
        short = _REQUIREMENTS.sub("", _OVERHEAD.sub("", _NODEPOOL.sub("", part)))
        if short and short not in kept:
            kept.append(short)
    return "; ".join(kept)


def asks(stage: Stage) -> str:
    """What one pod asks for ("cpu 1000, memory 4Gi"), as references._pool_limits reads
    it (podvalues.pod_asks)."""
    asked = podvalues.pod_asks(stage.resources)
    return ", ".join(f"{r} {asked[r]}" for r in ("cpu", "memory") if r in asked)


def summary(stage: Stage, index: int, virtual_cluster: str, pod: Mapping[str, Any],
            events: Sequence[Mapping[str, Any]], now: datetime) -> tuple[str, str] | None:
    """The stage's line from `pod`'s events (Karpenter's newest of the last
    refusals.EVENT_WINDOW, a FailedScheduling), or None when Karpenter said nothing (a
    static pool) or last nominated a node for it (one is launching)."""
    newest = refusals.latest([e for e in events if karpenters(e)], now)
    if newest is None or newest.get("reason") != FAILED_SCHEDULING:
        return None
    pool = f"pool '{stage.pool}'" if stage.pool else "its first pool"
    meta = pod.get("metadata") or {}
    name = meta.get("name", "")
    wants = f" asks for {a}" if (a := asks(stage)) else ""
    own = own_nodepools(str(meta.get("namespace") or ""), virtual_cluster, stage.pool)
    why = words(str(newest.get("message")), own)
    said = f"pod {name}{wants}: Karpenter found no node to launch for it" + (
        f": {why}" if why else "")
    fix = (f"check spec.stages[{index}].resources against {pool} of VirtualCluster "
           f"'{virtual_cluster}': its instance sizes and maxCPU, maxMemory, maxNodes")
    head = stall_head(stage)
    return WAITING_FOR_NODES, head + fit(said, fix, MESSAGE_CHARS - len(head))
