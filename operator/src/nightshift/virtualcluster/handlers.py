"""kopf registrations for VirtualClusters: one daemon per object; Node, NodeClaim and
PipelineRun events only wake it (see handlers.py for why daemons).

Deletion: kopf stops a daemon as soon as its object is marked for deletion, and a
restarted operator spawns none for such an object. So our own finalizer
(nightshift.io/virtual-cluster, added by the first pass) keeps the object, and the
VirtualCluster's watch event starts a deletion loop, the same pass in the same
wake-up scheme, which removes the finalizer once everything is cleaned up. A per-object
lock keeps the daemon's last pass and the deletion loop from overlapping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import kopf

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.wakeups import Key
from nightshift.kube import Kube, KubeError
from nightshift.pipelinerun.handlers import WAKEUPS
from nightshift.pipelinerun.spec import TERMINAL_PHASES
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster import reconcile as virtualcluster
from nightshift.virtualcluster.observe import Clouds

log = logging.getLogger("nightshift")

STATES: dict[Key, virtualcluster.LoopState] = {}
LOCKS: dict[Key, asyncio.Lock] = {}
DELETIONS: dict[Key, asyncio.Task[None]] = {}


def _key(namespace: str, name: str) -> Key:
    return (names.VIRTUALCLUSTER, namespace, name)


@kopf.on.startup()
def configure_virtualclusters(memo: kopf.Memo, **_: Any) -> None:
    memo.vc_config = OperatorConfig.from_env()
    memo.clouds = Clouds(memo.vc_config)


@kopf.on.cleanup()
async def stop_deletions(**_: Any) -> None:
    for task in DELETIONS.values():
        task.cancel()


async def _loop(key: Key, memo: Any, stop: Callable[[], bool]) -> None:
    _, namespace, name = key
    kube: Kube = memo.kube
    config: OperatorConfig = memo.vc_config
    state = STATES.setdefault(key, virtualcluster.LoopState())
    lock = LOCKS.setdefault(key, asyncio.Lock())
    while not stop():
        async with lock:
            try:
                outcome = await asyncio.to_thread(
                    virtualcluster.reconcile, kube, namespace, name, memo.clouds, state)
            except KubeError as e:
                # Conflicts and transient API errors: the next pass re-reads everything.
                log.warning("VirtualCluster %s/%s: %s; retrying", namespace, name, e)
                outcome = virtualcluster.Outcome(requeue_after=2.0)
        if outcome.gone:
            STATES.pop(key, None)
            WAKEUPS.forget(key)
            return
        await WAKEUPS.wait(key, outcome.requeue_after or config.resync)
        # Node events come in bursts (a NodePool scaling): one pass for the lot.
        await asyncio.sleep(config.min_pass_interval)


# The backoff lets a pass in flight finish before kopf cancels the daemon on deletion
# (the deletion loop then takes over); the VirtualCluster's event wakes it to notice.
@kopf.daemon(names.GROUP, names.VERSION, names.VIRTUALCLUSTERS, cancellation_backoff=5.0,
             cancellation_timeout=10)
async def virtualcluster_daemon(name: str, namespace: str | None, memo: Any,
                                stopped: kopf.DaemonStopped, **_: Any) -> None:
    await _loop(_key(namespace or "", name), memo, lambda: bool(stopped))


@kopf.on.event(names.GROUP, names.VERSION, names.VIRTUALCLUSTERS)
async def virtualcluster_event(name: str, namespace: str | None, body: kopf.Body,
                               memo: Any, **_: Any) -> None:
    key = _key(namespace or "", name)
    # Also lets a stopping daemon notice `stopped` at once.
    WAKEUPS.wake(key)
    meta = body.get("metadata", {})
    if not meta.get("deletionTimestamp"):
        return
    if names.FINALIZER_VIRTUAL_CLUSTER not in (meta.get("finalizers") or []):
        return
    task = DELETIONS.get(key)
    if task is None or task.done():
        DELETIONS[key] = asyncio.create_task(_loop(key, memo, lambda: False),
                                             name=f"delete {namespace}/{name}")


def _owner_key(labels: Any) -> Key | None:
    vc = labels.get(names.LABEL_VIRTUAL_CLUSTER)
    ns = labels.get(vcnames.LABEL_VC_NAMESPACE)
    return _key(ns, vc) if vc and ns else None


@kopf.on.event("v1", "nodes", labels={names.LABEL_POOL: kopf.PRESENT})
async def pool_node_event(labels: kopf.Labels, **_: Any) -> None:
    key = _owner_key(labels)
    if key is not None:
        WAKEUPS.wake(key)
        return
    # A node someone labeled by hand: it serves static-mode VirtualClusters.
    pool = labels.get(names.LABEL_POOL)
    for k, state in list(STATES.items()):
        if pool in state.static_pools:
            WAKEUPS.wake(k)


@kopf.on.event("karpenter.sh", "v1", "nodeclaims",
               labels={names.LABEL_VIRTUAL_CLUSTER: kopf.PRESENT})
async def nodeclaim_event(labels: kopf.Labels, **_: Any) -> None:
    key = _owner_key(labels)
    if key is not None:
        WAKEUPS.wake(key)


@kopf.on.event(names.GROUP, names.VERSION, names.PIPELINERUNS)
async def run_event_for_vc(body: kopf.Body, namespace: str | None, type: str | None,
                           **_: Any) -> None:
    # Only what can unblock a deletion: a run ending or going away. Progress updates
    # of a running run would otherwise wake the VirtualCluster every few seconds.
    vc = (body.get("spec") or {}).get("virtualCluster")
    phase = (body.get("status") or {}).get("phase")
    if vc and (type == "DELETED" or phase in TERMINAL_PHASES):
        WAKEUPS.wake(_key(namespace or "", vc))
