"""Running the kopf operator: scope, health endpoint, peering, clean stop on SIGTERM.

Peering (NIGHTSHIFT_PEERING=<name>, set by the Helm chart for its peering object): kopf
pauses every replica but the one of highest priority. Two things kopf does not do for us:

- choose priorities. Equal priorities pause *every* replica (kopf's process_peering_event
  pauses on "same_peers" too), so each replica gets its own: the oldest process wins
  (`peering_priority`), so a rolling update's new pod waits for the old one and a
  restarted pod yields to the peer that kept running.
- pause the engine. kopf's pause closes its watch streams and stops kopf daemons, but
  the engine's loops (engine/loop.py) are our asyncio tasks and would keep reconciling
  on their resync timers. kopf exposes no public pause signal (no activity handler, no
  setting), so `engine_follows_pause` takes kopf's own pause state, the ToggleSet its
  orchestrator and daemon killer obey, and stops every loop while it is on. On resume
  kopf re-lists every watched kind, and those initial-listing events start the loops
  again (pipelinerun/, virtualcluster/ and sharedstorage/handlers.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

import kopf
from kopf._core.engines.peering import Identity  # a NewType of str: kopf.run's type

from nightshift.config import OperatorConfig
from nightshift.engine.loop import Loops

log = logging.getLogger("nightshift")

ENV_PEERING = "NIGHTSHIFT_PEERING"
# How often a paused operator re-stops loops that events already inside kopf's workers
# when the pause came started anyway (kopf's daemon killer re-checks at the same rate).
RESTOP_INTERVAL = 1.0


def peering_priority(start_ms: int, jitter: int) -> int:
    """kopf's priority of a replica started at `start_ms` (ms since the epoch): older is
    higher. `jitter` (0..999) keeps two replicas started in the same millisecond apart;
    it never reorders replicas started in different milliseconds."""
    if not 0 <= jitter <= 999:
        raise ValueError(f"jitter must be in 0..999, not {jitter}")
    return -(start_ms * 1000 + jitter)


class PauseState(Protocol):
    """What the follower needs of kopf's pause ToggleSet."""

    def is_on(self) -> bool: ...

    async def wait_for(self, state: bool, /) -> None: ...


def stop_loops(kinds: Iterable[Loops[Any]]) -> int:
    """Ask every running loop to end after its pass in flight; how many were running."""
    stopped = 0
    for loops in kinds:
        for _, namespace, name in loops.running():
            loops.stop(namespace, name)
            stopped += 1
    return stopped


async def follow_pause(paused: PauseState, kinds: Iterable[Loops[Any]]) -> None:
    """Forever: while kopf is paused, no engine loop runs."""
    kinds = list(kinds)
    while True:
        await paused.wait_for(True)
        stopped = 0
        # is_on() and stop_loops() with no await between them: once kopf resumes, its
        # re-listing restarts loops, and none of those may be stopped here.
        while paused.is_on():
            stopped += stop_loops(kinds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(paused.wait_for(False), RESTOP_INTERVAL)
        log.info("kopf resumed after a pause (peering); %d reconcile loops were stopped "
                 "during it and restart from kopf's re-listing", stopped)


@contextlib.contextmanager
def engine_follows_pause(kinds: Iterable[Loops[Any]]) -> Iterator[list[PauseState]]:
    """While in effect, every kopf operator started in this process runs `follow_pause`
    on its pause ToggleSet; yields the list of the sets seen (for tests and logs).

    kopf builds the set in running.spawn_tasks and hands it to its orchestrator
    (orchestration.orchestrator, looked up on the module at spawn time): wrapping that
    call is the one place the set is reachable. If a kopf release renames the keyword,
    the wrapper fails and the operator exits with the error at start
    (tests/unit/test_operator_peering.py runs kopf's real spawn_tasks through it).
    """
    from kopf._core.reactor import orchestration

    original = orchestration.orchestrator
    kinds = list(kinds)
    seen: list[PauseState] = []

    def orchestrator(*, operator_paused: Any, **kwargs: Any) -> Any:
        seen.append(operator_paused)
        return _alongside(original(operator_paused=operator_paused, **kwargs),
                          follow_pause(operator_paused, kinds))

    orchestration.orchestrator = orchestrator
    try:
        yield seen
    finally:
        orchestration.orchestrator = original


async def _alongside(main: Any, helper: Any) -> None:
    """Run `main`; `helper` runs as long as it does."""
    task = asyncio.create_task(helper, name="nightshift: engine follows kopf's pause")
    try:
        await main
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def peering_from_env(environ: dict[str, str] | None = None,
                     now_ms: int | None = None) -> dict[str, Any]:
    """kopf.run's peering arguments: standalone unless NIGHTSHIFT_PEERING names a peering
    object, then that name and this process's priority (kopf treats a named peering as
    mandatory: it stays paused while the peering CRD or object is missing)."""
    env = os.environ if environ is None else environ
    name = env.get(ENV_PEERING, "").strip()
    if not name:
        return {"standalone": True}
    start = int(time.time() * 1000) if now_ms is None else now_ms
    return {"standalone": False, "peering_name": name,
            "priority": peering_priority(start, random.randint(0, 999))}  # noqa: S311  (a tie-break, not a secret)


def own_identity(environ: Mapping[str, str] | None = None) -> Identity:
    """kopf's identity for this process: POD_ID (the chart sets the pod's name), else
    host and PID. Not kopf's default, which asks the passwd database for the user name
    and crashes as a non-root uid without an entry (the chart's 65532)."""
    env = os.environ if environ is None else environ
    return Identity(env.get("POD_ID") or f"{socket.gethostname()}/{os.getpid()}")


def run_operator(namespaces: list[str], health_port: int, health_host: str = "0.0.0.0") -> int:  # noqa: S104  (in a pod: the kubelet probes the pod IP)
    # Importing registers the handlers with kopf's default registry.
    from nightshift.engine.kopfapp import KINDS
    from nightshift.pipelinerun import handlers as _pr  # noqa: F401
    from nightshift.sharedstorage import handlers as _ss  # noqa: F401
    from nightshift.virtualcluster import handlers as _vc  # noqa: F401

    try:
        OperatorConfig.from_env()
    except ValueError as e:
        # A bad setting never mends itself: say it once and exit, so the pod's restarts
        # and its termination message show it (kopf retries a failed startup each minute,
        # with the pod Running and nothing reconciled).
        sys.stderr.write(f"nightshift operator: bad configuration: {e}; fix it (the "
                         "chart's config.* values set these) and the pod starts\n")
        return 2
    liveness = f"http://{health_host}:{health_port}/healthz" if health_port else None
    peering = peering_from_env()
    if peering["standalone"]:
        log.info("standalone: no peering (%s unset); this process reconciles alone",
                 ENV_PEERING)
    else:
        log.info("peering %r as %s, priority %d (the oldest replica works, the others "
                 "wait paused)", peering["peering_name"], os.environ.get("POD_ID", "?"),
                 peering["priority"])
    # kopf.run installs SIGINT/SIGTERM handlers: the operator finishes the handlers in
    # flight, stops its daemons and exits 0.
    with engine_follows_pause([k.loops for k in KINDS]):
        kopf.run(
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=liveness,
            identity=own_identity(),
            **peering,
        )
    return 0
