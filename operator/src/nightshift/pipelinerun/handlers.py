"""kopf wiring for PipelineRuns: their watch events drive the engine's loops, and
events on their Jobs only wake them (see engine/loop.py).

No finalizer: a run's Jobs and ConfigMaps go with it through ownerReferences, so
deleting a run never waits for the operator.
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
from nightshift.pipelinerun import reconcile

LOOPS: Loops[reconcile.LoopState] = Loops(names.PIPELINERUN, reconcile.LoopState)


def _make_pass(kube: Kube, config: OperatorConfig) -> PassFn[reconcile.LoopState]:
    return partial(reconcile.reconcile, kube, config)


register(KindWiring(LOOPS, names.API_VERSION, names.PIPELINERUN, _make_pass))


@kopf.on.event(names.GROUP, names.VERSION, names.PIPELINERUNS)
async def pipelinerun_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    # kopf's initial listing (type None) starts loops for runs that existed before a
    # restart: the operator carries on from the Jobs.
    LOOPS.on_object_event(type, body)


@kopf.on.event("batch", "v1", "jobs", labels={names.LABEL_RUN: kopf.PRESENT})
async def job_event(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    LOOPS.wake(namespace or "", meta["labels"][names.LABEL_RUN])
