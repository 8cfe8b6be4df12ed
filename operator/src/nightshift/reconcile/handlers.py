"""kopf registrations: one daemon per object reconciles it in a loop; watch events wake it.

Why daemons rather than on.create/on.update handlers: a run's truth is its Jobs, not
the diff of its spec. A per-object loop that re-reads everything each pass is
level-based by construction, restarts cleanly (kopf resumes daemons for existing
objects), and lets a burst of Job status events collapse into a single pass.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from nightshift.api import names
from nightshift.kube import Kube, KubeError
from nightshift.reconcile import pipelinerun
from nightshift.reconcile.config import OperatorConfig
from nightshift.reconcile.wakeups import Key, Wakeups

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


@kopf.on.event(names.GROUP, names.VERSION, names.PIPELINERUNS)
async def pipelinerun_event(name: str, namespace: str | None, **_: Any) -> None:
    WAKEUPS.wake(_run_key(namespace or "", name))


@kopf.daemon(names.GROUP, names.VERSION, names.PIPELINERUNS, cancellation_timeout=10)
async def pipelinerun_daemon(name: str, namespace: str | None, memo: Any,
                             stopped: kopf.DaemonStopped, **_: Any) -> None:
    namespace = namespace or ""
    key = _run_key(namespace, name)
    kube: Kube = memo.kube
    config: OperatorConfig = memo.config
    loop_state = pipelinerun.LoopState()
    try:
        while not stopped:
            try:
                outcome = await asyncio.to_thread(
                    pipelinerun.reconcile, kube, namespace, name, config, loop_state)
            except KubeError as e:
                # Conflicts and transient API errors: the next pass re-reads everything.
                log.warning("PipelineRun %s/%s: %s; retrying", namespace, name, e)
                outcome = pipelinerun.Outcome(requeue_after=2.0)
            if outcome.gone:
                return
            await WAKEUPS.wait(key, outcome.requeue_after or config.resync)
            # Let a burst of events (many Jobs changing together) land before re-reading.
            await asyncio.sleep(config.min_pass_interval)
    finally:
        WAKEUPS.forget(key)
