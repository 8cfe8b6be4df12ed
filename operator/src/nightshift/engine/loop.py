"""One reconcile loop per object, for every kind: the operator's only engine.

Why loops rather than kopf's on.create/on.update handlers: an object's truth is what
it owns (Jobs, NodePools, nodes), not the diff of its spec. A per-object loop that
re-reads everything each pass is level-based by construction, restarts cleanly (kopf's
initial listing starts a loop for every existing object), and lets a burst of watch
events collapse into one pass.

Why not kopf daemons: kopf puts a finalizer on every object that has one and stops
the daemon as soon as the object is marked for deletion. A kind that needs clean-up
adds its own finalizer (its pass does, before creating anything that must not outlive
the object) and this same loop carries on through deletion until the pass says the
object is gone; a kind that needs none (PipelineRun: its children go with it through
ownerReferences) never waits for the operator to be up to be deleted.

A kind supplies one synchronous pass function, `(namespace, name, state) -> Outcome`,
that observes, plans (pure) and applies; `state` is what the object's loop remembers
between passes (lost on restart, harmlessly: the next pass re-reads everything). The
engine supplies, the same for every kind:
- wake-ups and their coalescing: events only set a flag; a pass runs at most once per
  settle interval however many arrive, except that a wake-up for a transition someone
  waits on (`wake(..., now=True)`: a stage Job finished) runs it without the settle;
- a per-object lock, so a pass in flight is never overlapped by another one for the
  same object (a deletion racing a pass, an object re-created under the same name);
- the error policy: any exception is logged and retried with exponential backoff
  (API errors as warnings, anything else with its traceback), and after
  `report_after` failures in a row the object gets a `ReconcileError` condition
  saying what fails, cleared by the next successful pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from nightshift import metrics
from nightshift.api import refusals
from nightshift.engine.wakeups import Key, Wakeups
from nightshift.kube import CONNECTIONS, KubeError

log = logging.getLogger("nightshift")
# Passes of every kind share these threads: as many as the API client's connections,
# whatever the host's CPU count (asyncio's default executor grows with it).
PASS_THREADS = ThreadPoolExecutor(max_workers=CONNECTIONS, thread_name_prefix="nightshift-pass")


@dataclass(frozen=True)
class Outcome:
    """What a pass tells its loop: when to look again (None: the resync interval), or
    that the object is gone and the loop ends."""

    requeue_after: float | None = None
    gone: bool = False


S = TypeVar("S")
PassFn = Callable[[str, str, S], Outcome]
# Sets (message) or clears (None) the object's ReconcileError condition.
ReportFn = Callable[[str, str, str | None], None]


@dataclass(frozen=True)
class ErrorPolicy:
    first_delay: float = 2.0
    max_delay: float = 60.0
    # Failures in a row before the object's status says so: one failed pass is usually
    # a conflict or a blip; three are something a person should see.
    report_after: int = 3

    def delay(self, failures: int) -> float:
        # The exponent stops growing long after the cap is reached: 2.0 * 2**1024 is
        # not a float, and the loop would die on the 1025th failure in a row (~17 h).
        doublings = min(max(failures - 1, 0), 64)
        return float(min(self.first_delay * 2 ** doublings, self.max_delay))


def describe(error: BaseException) -> str:
    if isinstance(error, KubeError):
        if error.status == 0:  # not reached: no answer to quote (kube._unreached)
            return error.message
        said = f"the Kubernetes API answered {error.status} {error.reason}: {error.message}"
        # The refusals every kind retries: say what ends them, which the API server's
        # words do not.
        fix = refusals.namespace_state(error.status, error.message)
        return f"{said} ({fix})" if fix else said
    return f"{type(error).__name__}: {error}"


@dataclass
class _Loop(Generic[S]):
    state: S
    task: asyncio.Task[None] | None = None
    stopping: bool = False


class Loops(Generic[S]):
    """The loops of one kind's objects. Created at import time by the kind's handlers
    module; `bind` gives it the pass once the operator has its API client and config."""

    def __init__(self, kind: str, state: Callable[[], S], *,
                 finalizer: str | None = None,
                 on_end: Callable[[str, str], None] | None = None) -> None:
        self.kind = kind
        self.finalizer = finalizer
        # Called with (namespace, name) when an object's loop ends and no other took its
        # place (deleted, gone, paused by peering, shutdown): what this process kept
        # about the object for others (metrics series) goes with it.
        self._on_end = on_end
        self.settle = 1.0
        self.resync = 60.0
        self.policy = ErrorPolicy()
        self.wakeups = Wakeups()
        self._new_state = state
        self._pass: PassFn[S] | None = None
        self._report: ReportFn | None = None
        self._loops: dict[Key, _Loop[S]] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        # Loop tasks not yet ended, a stopping one with its pass in flight included:
        # the loops gauge, which a paused operator's "no pass can write now" reads.
        self._alive = 0

    def bind(self, pass_fn: PassFn[S], *, settle: float, resync: float,
             report: ReportFn | None = None, policy: ErrorPolicy | None = None) -> None:
        self._pass = pass_fn
        self.settle = settle
        self.resync = resync
        self._report = report
        self.policy = policy or self.policy

    def states(self) -> dict[Key, S]:
        """Each running loop's state (for events that must find their objects by it)."""
        return {k: lp.state for k, lp in self._loops.items() if not lp.stopping}

    def key(self, namespace: str, name: str) -> Key:
        return (self.kind, namespace, name)

    def running(self) -> list[Key]:
        return [k for k, lp in self._loops.items() if not lp.stopping]

    def wake(self, namespace: str, name: str, *, now: bool = False) -> None:
        """Something the object owns changed: run a pass soon (coalesced), or with
        `now` as soon as the pass in flight (if any) ends, without the settle.

        An object with no loop has nothing to wake (a deleted run's Jobs going with it):
        a loop always passes first when it starts, so no wake-up is lost by this."""
        if self.key(namespace, name) not in self._loops:
            return
        metrics.WAKEUPS.labels(self.kind).inc()
        self.wakeups.wake(self.key(namespace, name), now=now)

    def on_object_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """The kind's own watch event (type None: kopf's initial listing)."""
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name"))
        if event_type == "DELETED":
            self.stop(namespace, name)
            return
        if meta.get("deletionTimestamp") and (
                self.finalizer is None or self.finalizer not in (meta.get("finalizers") or [])):
            # Nothing of ours left to clean up: the object goes without us.
            self.stop(namespace, name)
            return
        self.ensure(namespace, name)

    def ensure(self, namespace: str, name: str) -> None:
        """Start the object's loop unless one runs; wake it either way."""
        key = self.key(namespace, name)
        current = self._loops.get(key)
        if current is None or current.stopping or current.task is None or current.task.done():
            me: _Loop[S] = _Loop(self._new_state())
            self._loops[key] = me
            me.task = asyncio.create_task(self._run(key, me),
                                          name=f"{self.kind} {namespace}/{name}")
            self._alive += 1
            # When the task is done, not in _run's finally: a task cancelled before its
            # first step (shutdown) never runs that.
            me.task.add_done_callback(self._ended)
            metrics.LOOPS.labels(self.kind).set(self._alive)
        self.wake(namespace, name)

    def _ended(self, _task: asyncio.Task[None]) -> None:
        # Not len(running()), as before session 48: that leaves out a stopping loop whose
        # pass is still in flight, so another loop's end read 0 while a status write of
        # that pass was on its way (test_install's paused operator saw it land).
        self._alive -= 1
        metrics.LOOPS.labels(self.kind).set(self._alive)

    def stop(self, namespace: str, name: str) -> None:
        """End the object's loop after the pass in flight, if any (never mid-pass: the
        lock then keeps a successor loop from overlapping it)."""
        key = self.key(namespace, name)
        current = self._loops.get(key)
        if current is not None:
            current.stopping = True
            self.wakeups.wake(key, now=True)

    async def shutdown(self) -> None:
        tasks = []
        for key, lp in self._loops.items():
            # Stopped and woken, not only cancelled: on Python 3.11 asyncio.wait_for
            # can return instead of raising when the wait it guards ends as the cancel
            # lands; the loop then went on to wait out a whole resync, and shutdown
            # with it (test_engine_loop hung about once in fifty runs).
            lp.stopping = True
            self.wakeups.wake(key, now=True)
            if lp.task is not None:
                tasks.append(lp.task)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops.clear()

    async def _run(self, key: Key, me: _Loop[S]) -> None:
        _, namespace, name = key
        lock = self._locks.setdefault(key, asyncio.Lock())
        failures = 0
        # True at first: a ReconcileError an earlier loop or operator process left (a
        # restart, an upgrade, a failover) is cleared by this loop's first good pass;
        # the reporter reads the object and writes only if the condition is True.
        reported = True
        try:
            while not me.stopping:
                async with lock:
                    if me.stopping:
                        break
                    self.wakeups.passing(key)
                    outcome, error = await self._one_pass(namespace, name, me.state)
                    if error is None:
                        if reported and self._report is not None:
                            # Cleared only when the write went through: else the next
                            # good pass tries again, or the condition stays True for good.
                            reported = not await self._call_report(namespace, name, None)
                        failures = 0
                    else:
                        failures += 1
                        delay = self.policy.delay(failures)
                        outcome = Outcome(requeue_after=delay)
                        self._log_error(namespace, name, error, failures, delay)
                        if failures >= self.policy.report_after and self._report is not None:
                            # No count or current delay in the words: the same
                            # failure must not rewrite the status on every retry.
                            await self._call_report(namespace, name, (
                                f"reconcile passes keep failing ({self.policy.report_after} "
                                f"or more in a row); the last: {describe(error)}. The "
                                "operator retries, backing off to once every "
                                f"{self.policy.max_delay:g}s; its log has the details"))
                            reported = True
                if outcome.gone or me.stopping:
                    # A stopping loop never waits again: it shares its key's wake-ups
                    # with the loop that replaces it, and would take one of them.
                    break
                if error is not None:
                    # Backoff is not cut short by wake-ups: a failing pass must not run once
                    # per watch event.
                    await asyncio.sleep(outcome.requeue_after or 0)
                    continue
                await self.wakeups.wait(key, outcome.requeue_after or self.resync)
                if me.stopping:
                    break
                # Let a burst of events (many Jobs or nodes changing together) land first,
                # unless one marks a transition that should not wait.
                await self.wakeups.settle(key, self.settle)
        finally:
            if self._loops.get(key) is me:
                del self._loops[key]
                self.wakeups.forget(key)
                if not lock.locked():
                    self._locks.pop(key, None)
                if self._on_end is not None:
                    self._on_end(namespace, name)

    async def _one_pass(self, namespace: str, name: str,
                        state: S) -> tuple[Outcome, BaseException | None]:
        if self._pass is None:
            raise RuntimeError(f"{self.kind} loops were never bound to a pass")
        metrics.PASSES.labels(self.kind).inc()
        pass_fn = self._pass

        def timed() -> Outcome:
            # Timed in its thread: the pass itself, not its wait for a free thread.
            start = time.monotonic()
            try:
                return pass_fn(namespace, name, state)
            finally:
                metrics.RECONCILE_SECONDS.labels(self.kind).observe(time.monotonic() - start)

        try:
            return await asyncio.get_running_loop().run_in_executor(PASS_THREADS, timed), None
        except Exception as e:
            kind = "api" if isinstance(e, KubeError) else "unexpected"
            metrics.RECONCILE_ERRORS.labels(self.kind, kind).inc()
            return Outcome(requeue_after=self.policy.delay(1)), e

    def _log_error(self, namespace: str, name: str, error: BaseException, failures: int,
                   delay: float) -> None:
        what = (f"{self.kind} {namespace}/{name}: pass failed ({failures} in a row); "
                f"retry in {delay:g}s")
        if isinstance(error, KubeError):
            # Conflicts and transient API errors: the next pass re-reads everything.
            log.warning("%s: %s", what, describe(error))
        else:
            log.error("%s", what, exc_info=error)

    async def _call_report(self, namespace: str, name: str, message: str | None) -> bool:
        """Whether the report was written (best effort: the loop goes on either way)."""
        assert self._report is not None  # noqa: S101  (invariant for mypy: bind() set it)
        try:
            await asyncio.get_running_loop().run_in_executor(
                PASS_THREADS, self._report, namespace, name, message)
        except Exception as e:
            log.warning("%s %s/%s: could not %s the reconcile error on the object: %s",
                        self.kind, namespace, name, "clear" if message is None else "record",
                        describe(e))
            return False
        return True

