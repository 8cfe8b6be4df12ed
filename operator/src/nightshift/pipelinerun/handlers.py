"""kopf registrations: one loop per object reconciles it; watch events only wake it.

Why loops rather than on.create/on.update handlers: a run's truth is its Jobs, not
the diff of its spec. A per-object loop that re-reads everything each pass is
level-based by construction, restarts cleanly (kopf's initial listing restarts the
loops of existing objects), and lets a burst of Job status events collapse into a
single pass.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.wakeups import Key, Wakeups
from nightshift.kube import Kube, KubeError
from nightshift.pipelinerun import reconcile as pipelinerun

WAKEUPS = Wakeups()
log = logging.getLogger("nightshift")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # kopf's own per-handler events would be API writes per pass; we post our own, on
    # transitions only.
    settings.posting.enabled = False
    settings.persistence.finalizer = f"{names.GROUP}/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.GROUP, key="last-handled-configuration")
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = 8
    memo.kube = Kube.from_env()
    memo.config = OperatorConfig.from_env()


def _run_key(namespace: str, name: str) -> Key:
    return (names.PIPELINERUN, namespace, name)


@kopf.on.event("batch", "v1", "jobs", labels={names.LABEL_RUN: kopf.PRESENT})
async def job_event(meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    WAKEUPS.wake(_run_key(namespace or "", meta["labels"][names.LABEL_RUN]))


# One reconcile loop (an asyncio task) per PipelineRun. Not a kopf daemon: kopf puts a
# finalizer on every object that has one, and a PipelineRun needs none (its Jobs and
# ConfigMaps go with it through ownerReferences). Without the finalizer, deleting a run
# never waits for the operator, and a run costs one API write less.
LOOPS: dict[Key, asyncio.Task[None]] = {}


@kopf.on.event(names.GROUP, names.VERSION, names.PIPELINERUNS)
async def pipelinerun_event(type: str | None, name: str, namespace: str | None,
                            meta: kopf.Meta, memo: Any, **_: Any) -> None:
    key = _run_key(namespace or "", name)
    if type == "DELETED" or meta.get("deletionTimestamp"):
        task = LOOPS.pop(key, None)
        if task is not None:
            task.cancel()
        WAKEUPS.forget(key)
        return
    # kopf's initial listing (type None) starts loops for runs that existed before a
    # restart: the operator carries on from the Jobs.
    if key not in LOOPS or LOOPS[key].done():
        LOOPS[key] = asyncio.create_task(_pipelinerun_loop(key, memo))
    WAKEUPS.wake(key)


@kopf.on.cleanup()
async def stop_loops(**_: Any) -> None:
    tasks = list(LOOPS.values())
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    LOOPS.clear()


async def _pipelinerun_loop(key: Key, memo: Any) -> None:
    _, namespace, name = key
    kube: Kube = memo.kube
    config: OperatorConfig = memo.config
    loop_state = pipelinerun.LoopState()
    while True:
        try:
            outcome = await asyncio.to_thread(
                pipelinerun.reconcile, kube, namespace, name, config, loop_state)
        except KubeError as e:
            # Conflicts and transient API errors: the next pass re-reads everything.
            log.warning("PipelineRun %s/%s: %s; retrying", namespace, name, e)
            outcome = pipelinerun.Outcome(requeue_after=2.0)
        except Exception:
            # A bug must not kill the loop silently: log it and retry with backoff.
            log.exception("PipelineRun %s/%s: reconcile failed; retrying", namespace, name)
            outcome = pipelinerun.Outcome(requeue_after=10.0)
        if outcome.gone:
            LOOPS.pop(key, None)
            WAKEUPS.forget(key)
            return
        await WAKEUPS.wait(key, outcome.requeue_after or config.resync)
        # Let a burst of events (many Jobs changing together) land before re-reading.
        await asyncio.sleep(config.min_pass_interval)
