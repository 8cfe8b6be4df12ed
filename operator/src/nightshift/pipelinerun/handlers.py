"""kopf wiring for PipelineRuns: their watch events drive the engine's loops, and
events on their Jobs, and on the SharedStorages and VirtualClusters they name, only
wake them (see engine/loop.py).

No finalizer: a run's Jobs and ConfigMaps go with it through ownerReferences, so
deleting a run never waits for the operator.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

import kopf

from nightshift import metrics
from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.kopfapp import KindWiring, register
from nightshift.engine.loop import Loops, PassFn
from nightshift.kube import Kube
from nightshift.pipelinerun import cost, progress, reconcile


def _forget(namespace: str, name: str) -> None:
    # A deleted (or no longer ours) run leaves the metrics this process serves.
    metrics.observe_run(namespace, name, None)


LOOPS: Loops[reconcile.LoopState] = Loops(names.PIPELINERUN, reconcile.LoopState,
                                          on_end=_forget)


def _make_pass(kube: Kube, config: OperatorConfig) -> PassFn[reconcile.LoopState]:
    return partial(reconcile.reconcile, kube, config)


register(KindWiring(LOOPS, names.API_VERSION, names.PIPELINERUN, _make_pass))


@kopf.on.event(names.GROUP, names.VERSION, names.PIPELINERUNS)
async def pipelinerun_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    # kopf's initial listing (type None) starts loops for runs that existed before a
    # restart: the operator carries on from the Jobs.
    LOOPS.on_object_event(type, body)


@kopf.on.event("batch", "v1", "jobs", labels={names.LABEL_RUN: kopf.PRESENT})
async def job_event(type: str | None, meta: kopf.Meta, status: kopf.Status,
                    namespace: str | None, **_: Any) -> None:
    run = meta["labels"][names.LABEL_RUN]
    state = LOOPS.states().get(LOOPS.key(namespace or "", run))
    now = False
    if state is not None:
        # Each change of the Ready count, when it happened: what the stage's cost
        # integrates (pipelinerun/cost.py), finer than the passes this wakes.
        state.ready_samples.append((cost.write_time(datetime.now(UTC), meta), str(meta["name"]),
                                    str(meta["labels"].get(names.LABEL_STAGE, meta["name"])),
                                    int(status.get("ready") or 0)))
        # A stage attempt's end (a condition the pass counts: progress.ENDING) is what
        # the next stage and the run's phase wait on: pass without the settle
        # interval, once per Job. A finished Job's later events wake as usual, and so
        # does a restart's initial listing (type None), whose first pass runs at once.
        uid = str(meta.get("uid") or meta["name"])
        if progress.ended({"status": status}) and uid not in state.finished_jobs:
            state.finished_jobs.add(uid)
            now = type is not None
    LOOPS.wake(namespace or "", run, now=now)


def _wake_referencing(kind: str, namespace: str | None, name: str) -> None:
    for (_, ns, run), state in LOOPS.states().items():
        if ns == (namespace or "") and (kind, name) in state.references:
            LOOPS.wake(ns, run)


@kopf.on.event(names.GROUP, names.VERSION, names.SHAREDSTORAGES)
async def storage_event_for_runs(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    # Created, fixed or changed: the runs that name it look again (coalesced).
    _wake_referencing(names.SHAREDSTORAGE, namespace, str(meta["name"]))


@kopf.on.event(names.GROUP, names.VERSION, names.VIRTUALCLUSTERS)
async def virtualcluster_event_for_runs(meta: kopf.Meta, namespace: str | None,
                                        **_: Any) -> None:
    _wake_referencing(names.VIRTUALCLUSTER, namespace, str(meta["name"]))
