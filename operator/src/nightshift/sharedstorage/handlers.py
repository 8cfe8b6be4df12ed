"""kopf wiring for SharedStorages: their watch events drive the engine's loops; events
on the workloads, pods and Jobs they own only wake them, and so do a PipelineRun that
names one ending (it may unblock a deletion) and an event of the VirtualCluster a
storage waits for.

The watches of Deployments, DaemonSets, StatefulSets and Pods carry a server-side
label selector (nightshift.io/storage): kopf would otherwise stream every pod of the
cluster, pipeline pods by the thousand, into the operator to drop them here. Jobs are
watched for PipelineRuns already (their own label); ours are told apart here.

Our own finalizer (nightshift.io/shared-storage, added by the first pass) keeps a
deleted SharedStorage until its pass has removed what the garbage collector cannot
(the cluster-scoped NFS PersistentVolume); the same loop runs those passes.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import kopf

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.kopfapp import KindWiring, register
from nightshift.engine.loop import Loops, PassFn
from nightshift.kube import Kube
from nightshift.pipelinerun.handlers import LOOPS as RUN_LOOPS
from nightshift.pipelinerun.spec import TERMINAL_PHASES
from nightshift.sharedstorage import reconcile

LOOPS: Loops[reconcile.LoopState] = Loops(names.SHAREDSTORAGE, reconcile.LoopState,
                                          finalizer=names.FINALIZER_SHARED_STORAGE)

# (apiVersion, plural) of the workloads and pods a storage owns: whose changes it
# waits on (servers ready, clients mounted), watched only with its label.
OWNED_WATCHES = (("apps/v1", "deployments"), ("apps/v1", "daemonsets"),
                 ("apps/v1", "statefulsets"), ("v1", "pods"))


def _make_pass(kube: Kube, config: OperatorConfig) -> PassFn[reconcile.LoopState]:
    return partial(reconcile.reconcile, reconcile.Context.from_config(kube, config))


register(KindWiring(LOOPS, names.API_VERSION, names.SHAREDSTORAGE, _make_pass))


@kopf.on.startup()
def watch_only_storage_objects(settings: kopf.OperatorSettings, **_: Any) -> None:
    for api_version, plural in OWNED_WATCHES:
        settings.watching.label_selectors[api_version, plural] = names.LABEL_STORAGE


@kopf.on.event(names.GROUP, names.VERSION, names.SHAREDSTORAGES)
async def sharedstorage_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    LOOPS.on_object_event(type, body)
    if type == "ADDED":
        # Runs of the namespace may wait for it (pipelinerun/binding.py): look now rather
        # than at their next timed pass. Creations are rare; a run that does not name it
        # re-plans to the same result.
        namespace = body.get("metadata", {}).get("namespace", "")
        for _kind, ns, run in RUN_LOOPS.running():
            if ns == namespace:
                RUN_LOOPS.wake(ns, run)


@kopf.on.event(names.GROUP, names.VERSION, names.VIRTUALCLUSTERS)
async def virtualcluster_event_for_storages(meta: kopf.Meta, namespace: str | None,
                                            **_: Any) -> None:
    # Its first pass sets status.mode, which a storage placed on its pools waits for
    # (plan.py): those storages look now rather than at their next timed pass.
    for (_kind, ns, waiting), state in LOOPS.states().items():
        if ns == (namespace or "") and state.awaiting_virtual_cluster == str(meta["name"]):
            LOOPS.wake(ns, waiting)


def _wake_owner(meta: kopf.Meta, namespace: str | None) -> None:
    storage = (meta.get("labels") or {}).get(names.LABEL_STORAGE)
    if storage and namespace:
        LOOPS.wake(namespace, storage)


_OURS = {names.LABEL_STORAGE: kopf.PRESENT}


@kopf.on.event("apps", "v1", "deployments", labels=_OURS)
async def storage_deployment_event(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    _wake_owner(meta, namespace)


@kopf.on.event("apps", "v1", "daemonsets", labels=_OURS)
async def storage_daemonset_event(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    _wake_owner(meta, namespace)


@kopf.on.event("apps", "v1", "statefulsets", labels=_OURS)
async def storage_statefulset_event(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    _wake_owner(meta, namespace)


@kopf.on.event("v1", "pods", labels=_OURS)
async def storage_pod_event(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    _wake_owner(meta, namespace)


@kopf.on.event("batch", "v1", "jobs", labels={names.LABEL_STORAGE: kopf.PRESENT})
async def storage_job_event(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    _wake_owner(meta, namespace)


@kopf.on.event(names.GROUP, names.VERSION, names.PIPELINERUNS)
async def run_event_for_storage(body: kopf.Body, namespace: str | None, type: str | None,
                                **_: Any) -> None:
    # Only what can unblock a deletion: a run ending or going away.
    phase = (body.get("status") or {}).get("phase")
    if type != "DELETED" and phase not in TERMINAL_PHASES:
        return
    for entry in (body.get("spec") or {}).get("storage") or []:
        name = entry.get("sharedStorage") if isinstance(entry, dict) else None
        if name:
            LOOPS.wake(namespace or "", name)
