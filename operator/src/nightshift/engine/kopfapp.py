"""The kopf application: settings, the API client and configuration, and the binding
of every kind's loops to its pass. Each kind's handlers module registers itself here
(`register`) and adds only its own watch events."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf
import prometheus_client

from nightshift.api import names
from nightshift.config import OperatorConfig
from nightshift.engine.loop import Loops, PassFn
from nightshift.engine.status import reconcile_error_reporter
from nightshift.kube import Kube

log = logging.getLogger("nightshift")


@dataclass(frozen=True)
class KindWiring:
    loops: Loops[Any]
    api_version: str
    kind: str
    # Builds the kind's pass from the operator's API client and configuration.
    make_pass: Callable[[Kube, OperatorConfig], PassFn[Any]]


KINDS: list[KindWiring] = []


def register(wiring: KindWiring) -> KindWiring:
    KINDS.append(wiring)
    return wiring


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # kopf's own per-handler events would be API writes per pass; kinds post their own,
    # on transitions only.
    settings.posting.enabled = False
    settings.persistence.finalizer = f"{names.GROUP}/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.GROUP, key="last-handled-configuration")
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = 8
    config = OperatorConfig.from_env()
    kube = Kube.from_env()
    memo.kube = kube
    memo.config = config
    for k in KINDS:
        k.loops.bind(k.make_pass(kube, config), settle=config.min_pass_interval,
                     resync=config.resync,
                     report=reconcile_error_reporter(kube, k.api_version, k.kind))
    if config.metrics_port:
        prometheus_client.start_http_server(config.metrics_port)
        log.info("metrics on :%d/metrics", config.metrics_port)


@kopf.on.cleanup()
async def stop_loops(**_: Any) -> None:
    await asyncio.gather(*(k.loops.shutdown() for k in KINDS))
