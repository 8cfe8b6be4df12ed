"""kopf wiring for VirtualClusters: their watch events drive the engine's loops; node,
NodeClaim and PipelineRun events only wake them (see engine/loop.py).

Our own finalizer (nightshift.io/virtual-cluster, added by the first pass) keeps a
deleted VirtualCluster until its pass has removed everything it made; the same loop
runs those deletion passes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

import kopf

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.kopfapp import KindWiring, register
from nightshift.engine.loop import Loops, PassFn
from nightshift.kube import Kube
from nightshift.pipelinerun.spec import TERMINAL_PHASES
from nightshift.virtualcluster import objectnames, reconcile

LOOPS: Loops[reconcile.LoopState] = Loops(names.VIRTUALCLUSTER, reconcile.LoopState,
                                          finalizer=names.FINALIZER_VIRTUAL_CLUSTER)


def _make_pass(kube: Kube, config: OperatorConfig) -> PassFn[reconcile.LoopState]:
    return partial(reconcile.reconcile, reconcile.Context.from_config(kube, config))


register(KindWiring(LOOPS, names.API_VERSION, names.VIRTUALCLUSTER, _make_pass))


@kopf.on.event(names.GROUP, names.VERSION, names.VIRTUALCLUSTERS)
async def virtualcluster_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    LOOPS.on_object_event(type, body)


def _owner(labels: Any) -> tuple[str, str] | None:
    vc = labels.get(names.LABEL_VIRTUAL_CLUSTER)
    ns = labels.get(objectnames.LABEL_VC_NAMESPACE)
    return (ns, vc) if vc and ns else None


@kopf.on.event("v1", "nodes", labels={names.LABEL_POOL: kopf.PRESENT})
async def pool_node_event(labels: kopf.Labels, **_: Any) -> None:
    owner = _owner(labels)
    if owner is not None:
        LOOPS.wake(*owner)
        return
    # A node someone labeled by hand: it serves static-mode VirtualClusters.
    pool = labels.get(names.LABEL_POOL)
    for key, state in LOOPS.states().items():
        if pool in state.static_pools:
            LOOPS.wake(key[1], key[2])


@kopf.on.event("karpenter.sh", "v1", "nodepools",
               labels={names.LABEL_VIRTUAL_CLUSTER: kopf.PRESENT})
async def nodepool_event(labels: kopf.Labels, **_: Any) -> None:
    # Our own NodePools: a hand edit is drift, restored by the pass this wakes.
    owner = _owner(labels)
    if owner is not None:
        LOOPS.wake(*owner)


@kopf.on.event("karpenter.sh", "v1", "nodeclaims",
               labels={names.LABEL_VIRTUAL_CLUSTER: kopf.PRESENT})
async def nodeclaim_event(labels: kopf.Labels, meta: kopf.Meta, type: str | None,
                          **_: Any) -> None:
    owner = _owner(labels)
    if owner is None:
        return
    if type == "DELETED":
        # Karpenter lets a NodeClaim go once its instance is terminated: billing ends
        # now, not at the pass this wakes (virtualcluster/cost.py).
        state = LOOPS.states().get(LOOPS.key(*owner))
        if state is not None:
            state.gone_at[str(meta.get("name"))] = datetime.now(UTC)
    LOOPS.wake(*owner)


@kopf.on.event(names.GROUP, names.VERSION, names.PIPELINERUNS)
async def run_event_for_vc(body: kopf.Body, namespace: str | None, type: str | None,
                           **_: Any) -> None:
    # Only what can unblock a deletion: a run ending or going away. Progress updates
    # of a running run would otherwise wake the VirtualCluster every few seconds.
    vc = (body.get("spec") or {}).get("virtualCluster")
    phase = (body.get("status") or {}).get("phase")
    if vc and (type == "DELETED" or phase in TERMINAL_PHASES):
        LOOPS.wake(namespace or "", vc)
