"""The loop engine without a cluster: coalescing, the error policy, deletion racing a pass.

Passes are plain functions run in worker threads, as in the operator; the tests drive
the asyncio side with short settle times and wait on what the passes record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nightshift.api import names
from nightshift.engine.loop import ErrorPolicy, Loops, Outcome, describe
from nightshift.engine.status import reconcile_error_reporter
from nightshift.kube import KubeError
from tests.unit.test_chart_kubecalls import RecordingKube

FINALIZER = "example.io/cleanup"


@dataclass
class State:
    passes: int = 0


@dataclass
class Recorder:
    calls: list[str] = field(default_factory=list)
    reports: list[str | None] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, name: str) -> None:
        with self.lock:
            self.calls.append(name)
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def leave(self) -> None:
        with self.lock:
            self.active -= 1

    def report(self, _ns: str, _name: str, message: str | None) -> None:
        self.reports.append(message)

    def record(self, _ns: str, name: str, _s: State) -> Outcome:
        """A pass that only records itself."""
        self.enter(name)
        self.leave()
        return Outcome()

    def first_blocks(self, release: threading.Event) -> Callable[[str, str, State], Outcome]:
        """A pass that records itself; the first one waits for `release`."""
        def pass_fn(_ns: str, name: str, state: State) -> Outcome:
            self.enter(name)
            state.passes += 1
            if state.passes == 1:
                release.wait(5)
            self.leave()
            return Outcome()
        return pass_fn


def body(name: str = "a", *, deleting: bool = False,
         finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": name, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


async def until(what: str, cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def make(pass_fn: Callable[[str, str, State], Outcome], rec: Recorder | None = None, *,
         settle: float = 0.05, resync: float = 30.0, finalizer: str | None = None,
         policy: ErrorPolicy | None = None) -> Loops[State]:
    loops: Loops[State] = Loops("Example", State, finalizer=finalizer)
    loops.bind(pass_fn, settle=settle, resync=resync,
               report=rec.report if rec else None, policy=policy)
    return loops


def test_a_burst_of_wakeups_during_a_pass_coalesces_into_one_more_pass() -> None:
    rec = Recorder()
    release = threading.Event()
    pass_fn = rec.first_blocks(release)

    async def main() -> None:
        loops = make(pass_fn)
        loops.on_object_event(None, body())
        await until("first pass", lambda: len(rec.calls) == 1)
        for _ in range(500):  # thousands of Jobs finishing at once
            loops.wake("ns", "a")
        release.set()
        await until("second pass", lambda: len(rec.calls) == 2)
        await asyncio.sleep(0.3)  # many settle intervals: no third pass comes
        assert len(rec.calls) == 2
        await loops.shutdown()

    run(main)


def test_requeue_after_runs_the_next_pass_without_any_event() -> None:
    rec = Recorder()

    def pass_fn(_ns: str, name: str, _s: State) -> Outcome:
        rec.enter(name)
        rec.leave()
        return Outcome(requeue_after=0.05)

    async def main() -> None:
        loops = make(pass_fn, settle=0.0)
        loops.ensure("ns", "a")
        await until("three passes", lambda: len(rec.calls) >= 3)
        await loops.shutdown()

    run(main)


def test_a_wakeup_for_a_transition_cuts_the_settle_short() -> None:
    rec = Recorder()

    async def main() -> None:
        loops = make(rec.record, settle=60.0)
        loops.ensure("ns", "a")
        await until("first pass", lambda: len(rec.calls) == 1)
        loops.wake("ns", "a")  # progress: lands within the settle interval
        await asyncio.sleep(0.3)
        assert len(rec.calls) == 1
        loops.wake("ns", "a", now=True)  # a stage Job finished
        await until("the pass the transition asked for", lambda: len(rec.calls) == 2)
        loops.wake("ns", "a")  # answered already: back to settling
        await asyncio.sleep(0.3)
        assert len(rec.calls) == 2
        await loops.shutdown()

    run(main)


def test_a_transition_during_a_pass_runs_the_next_one_without_settling() -> None:
    rec = Recorder()
    release = threading.Event()
    pass_fn = rec.first_blocks(release)

    async def main() -> None:
        loops = make(pass_fn, settle=60.0)
        loops.ensure("ns", "a")
        await until("first pass", lambda: len(rec.calls) == 1)
        loops.wake("ns", "a", now=True)  # after the pass read the Jobs
        release.set()
        await until("second pass", lambda: len(rec.calls) == 2)
        await loops.shutdown()

    run(main)


def test_stopping_does_not_wait_out_the_settle() -> None:
    def pass_fn(_ns: str, _name: str, _s: State) -> Outcome:
        return Outcome()

    async def main() -> None:
        loops = make(pass_fn, settle=60.0)
        loops.ensure("ns", "a")
        loops.wake("ns", "a")
        await asyncio.sleep(0.1)  # the loop now settles for a minute
        loops.stop("ns", "a")
        await until("the loop ends", lambda: not loops.running() and not loops._loops)
        await loops.shutdown()

    run(main)


def test_unexpected_errors_back_off_then_report_then_clear() -> None:
    rec = Recorder()
    fail = {"left": 4}

    def pass_fn(_ns: str, name: str, _s: State) -> Outcome:
        rec.enter(name)
        rec.leave()
        if fail["left"] > 0:
            fail["left"] -= 1
            raise ValueError("a bug in the planner")
        return Outcome()

    policy = ErrorPolicy(first_delay=0.02, max_delay=0.05, report_after=3)

    async def main() -> None:
        loops = make(pass_fn, rec, policy=policy)
        loops.ensure("ns", "a")
        await until("recovery", lambda: len(rec.calls) == 5)
        await until("the report cleared", lambda: bool(rec.reports) and rec.reports[-1] is None)
        await loops.shutdown()

    run(main)
    # Reported after the 3rd and the 4th failure (once a pass in a row failed 3 times),
    # then cleared once by the first successful pass.
    assert len(rec.reports) == 3
    first, second, cleared = rec.reports
    assert first is not None and "keep failing (3 or more in a row)" in first
    assert "ValueError: a bug in the planner" in first
    # The same failure in the same words: the status is not rewritten per retry.
    assert second == first
    assert cleared is None


def test_backoff_doubles_up_to_its_cap() -> None:
    p = ErrorPolicy(first_delay=2, max_delay=60)
    assert [p.delay(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [2, 4, 8, 16, 32, 60, 60]


def test_api_errors_follow_the_same_policy_and_name_the_status() -> None:
    rec = Recorder()

    def pass_fn(_ns: str, name: str, _s: State) -> Outcome:
        rec.enter(name)
        rec.leave()
        raise KubeError(403, "Forbidden", 'jobs.batch is forbidden: cannot create')

    async def main() -> None:
        loops = make(pass_fn, rec, policy=ErrorPolicy(first_delay=0.01, max_delay=0.01,
                                                      report_after=2))
        loops.ensure("ns", "a")
        await until("a report", lambda: bool(rec.reports))
        await loops.shutdown()

    run(main)
    msg = rec.reports[0]
    assert msg is not None and "403 Forbidden" in msg and "jobs.batch is forbidden" in msg


def test_wakeups_do_not_cut_a_backoff_short() -> None:
    rec = Recorder()

    def pass_fn(_ns: str, name: str, _s: State) -> Outcome:
        rec.enter(name)
        rec.leave()
        raise RuntimeError("boom")

    async def main() -> None:
        loops = make(pass_fn, policy=ErrorPolicy(first_delay=30, max_delay=30,
                                                 report_after=99))
        loops.ensure("ns", "a")
        await until("first pass", lambda: len(rec.calls) == 1)
        for _ in range(20):
            loops.wake("ns", "a")
            await asyncio.sleep(0.01)
        assert len(rec.calls) == 1
        await loops.shutdown()

    run(main)


def test_deletion_racing_a_pass_never_overlaps_two_passes() -> None:
    """The object is deleted and re-created while its pass runs: the old loop finishes
    its pass, ends, and the new loop's first pass starts only after it."""
    rec = Recorder()
    release = threading.Event()

    def pass_fn(_ns: str, name: str, state: State) -> Outcome:
        rec.enter(name)
        try:
            state.passes += 1
            if len(rec.calls) == 1:
                release.wait(5)
        finally:
            rec.leave()
        return Outcome()

    async def main() -> None:
        loops = make(pass_fn)
        loops.on_object_event(None, body())
        await until("first pass", lambda: rec.active == 1)
        loops.on_object_event("DELETED", body())
        loops.on_object_event("ADDED", body())  # re-created under the same name
        await asyncio.sleep(0.2)
        assert len(rec.calls) == 1, "a second pass started while the first ran"
        release.set()
        await until("the new loop's pass", lambda: len(rec.calls) == 2)
        assert rec.max_active == 1
        assert len(loops.running()) == 1
        await loops.shutdown()

    run(main)


def test_deletion_keeps_the_loop_while_our_finalizer_is_on_the_object() -> None:
    rec = Recorder()

    def pass_fn(_ns: str, name: str, _s: State) -> Outcome:
        rec.enter(name)
        rec.leave()
        return Outcome(requeue_after=0.02)

    async def main() -> None:
        loops = make(pass_fn, settle=0.0, finalizer=FINALIZER)
        loops.on_object_event(None, body(deleting=True, finalizers=(FINALIZER,)))
        await until("deletion passes", lambda: len(rec.calls) >= 2)
        assert loops.running() == [("Example", "ns", "a")]
        # Our finalizer is gone (the pass removed it): nothing left for us to do.
        loops.on_object_event("MODIFIED", body(deleting=True))
        await until("the loop to end", lambda: not loops.running())
        await loops.shutdown()

    run(main)


def test_a_kind_without_finalizer_stops_at_the_deletion_mark() -> None:
    rec = Recorder()

    async def main() -> None:
        loops = make(rec.record)
        loops.on_object_event(None, body())
        await until("first pass", lambda: len(rec.calls) == 1)
        loops.on_object_event("MODIFIED", body(deleting=True, finalizers=("other.io/x",)))
        await until("the loop to end", lambda: not loops.running())
        await loops.shutdown()

    run(main)


def test_gone_ends_the_loop_and_drops_its_state() -> None:
    def pass_fn(_ns: str, _name: str, _s: State) -> Outcome:
        return Outcome(gone=True)

    async def main() -> None:
        loops = make(pass_fn)
        loops.ensure("ns", "a")
        await until("the loop to end", lambda: not loops.running())
        assert loops.states() == {}
        await loops.shutdown()

    run(main)


def test_a_failing_report_does_not_stop_the_loop() -> None:
    calls: list[int] = []

    def pass_fn(_ns: str, _name: str, _s: State) -> Outcome:
        calls.append(1)
        raise RuntimeError("boom")

    def bad_report(_ns: str, _name: str, _m: str | None) -> None:
        raise KubeError(409, "Conflict", "the object has been modified")

    async def main() -> None:
        loops: Loops[State] = Loops("Example", State)
        loops.bind(pass_fn, settle=0, resync=30, report=bad_report,
                   policy=ErrorPolicy(first_delay=0.01, max_delay=0.01, report_after=1))
        loops.ensure("ns", "a")
        await until("passes after failed reports", lambda: len(calls) >= 4)
        await loops.shutdown()

    run(main)


def test_the_refusals_every_kind_retries_say_what_ends_them() -> None:
    quota = KubeError(403, "Forbidden", 'applying Job nightly-calib-0: jobs.batch '
                      '"nightly-calib-0" is forbidden: exceeded quota: batch, requested: '
                      "count/jobs.batch=1, used: count/jobs.batch=20, limited: "
                      "count/jobs.batch=20")
    assert describe(quota).endswith("(the namespace's ResourceQuota is full: raise it, or "
                                    "wait for other objects in the namespace to go)")
    gone = KubeError(403, "Forbidden", 'configmaps "x" is forbidden: unable to create new '
                     "content in namespace physics because it is being terminated")
    assert describe(gone).endswith("(the namespace is being deleted: nothing can be "
                                   "created in it)")
    other = KubeError(403, "Forbidden", 'jobs.batch is forbidden: User "x" cannot create')
    assert describe(other) == ('the Kubernetes API answered 403 Forbidden: jobs.batch is '
                               'forbidden: User "x" cannot create')


def test_a_reconcile_error_an_earlier_process_left_is_cleared_by_the_first_good_pass() -> None:
    # The operator restarted (an upgrade, a failover) after passes failed: its new loop
    # has seen no failure, yet the object still says ReconcileError=True.
    run_obj = {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
               "metadata": {"name": "a", "namespace": "ns", "generation": 1},
               "spec": {}, "status": {"conditions": [{
                   "type": "ReconcileError", "status": "True", "reason": "ReconcileFailing",
                   "message": "3 reconcile passes in a row failed",
                   "lastTransitionTime": "2026-11-30T00:00:00Z", "observedGeneration": 1}]}}
    kube = RecordingKube([run_obj])
    report = reconcile_error_reporter(kube, names.API_VERSION, names.PIPELINERUN)

    def error() -> dict[str, Any]:
        got = kube.get(names.API_VERSION, names.PIPELINERUN, "a", "ns") or {}
        return next(c for c in got["status"]["conditions"] if c["type"] == "ReconcileError")

    async def main() -> None:
        loops: Loops[State] = Loops("Example", State)
        loops.bind(lambda _ns, _n, _s: Outcome(), settle=0.01, resync=30.0, report=report)
        loops.ensure("ns", "a")
        await until("the error cleared", lambda: error()["status"] == "False")
        await loops.shutdown()

    run(main)
    assert error()["reason"] == "Recovered", error()


def test_a_lasting_failure_writes_its_reconcile_error_once() -> None:
    run_obj = {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
               "metadata": {"name": "a", "namespace": "ns", "generation": 1},
               "spec": {}, "status": {}}
    kube = RecordingKube([run_obj])
    report = reconcile_error_reporter(kube, names.API_VERSION, names.PIPELINERUN)

    def version() -> str:
        got = kube.get(names.API_VERSION, names.PIPELINERUN, "a", "ns") or {}
        return str(got["metadata"]["resourceVersion"])

    report("ns", "a", "passes keep failing; the last: X")
    written = version()
    report("ns", "a", "passes keep failing; the last: X")
    assert version() == written  # the same words: no write
    report("ns", "a", "passes keep failing; the last: Y")
    assert version() != written  # another failure is said


def test_shutdown_ends_a_loop_whose_wait_swallows_the_cancel() -> None:
    """Python 3.11's asyncio.wait_for can return instead of raising CancelledError when
    its wait ends as the cancel lands: the loop must still end (it is also stopped)."""
    rec = Recorder()

    def pass_fn(_ns: str, name: str, _s: State) -> Outcome:
        rec.enter(name)
        rec.leave()
        return Outcome()

    async def main() -> None:
        loops = make(pass_fn, rec)
        real_wait = loops.wakeups.wait

        swallowed: list[Any] = []

        async def swallowing(key: Any, timeout: float) -> bool:
            try:
                return await real_wait(key, timeout)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(key)
                return True  # what wait_for does when its wait is done as it is cancelled

        loops.wakeups.wait = swallowing  # type: ignore[method-assign]
        loops.ensure("ns", "a")
        await until("the first pass", lambda: len(rec.calls) == 1)
        await asyncio.sleep(0.05)  # in its wait for the next wake-up
        # Within 5 s, not a resync (30 s) or never. (The wake shutdown now sends with
        # its cancel makes the real wait_for swallow it too, as in the hang.)
        await asyncio.wait_for(loops.shutdown(), 5)

    run(main)


def test_backoff_never_overflows_however_long_a_failure_lasts() -> None:
    # 2.0 * 2**1024 is no float: the 1025th failure in a row (about 17 h at the cap)
    # used to end the object's loop for good.
    assert ErrorPolicy().delay(1025) == ErrorPolicy().delay(10**6) == 60.0


def test_a_clear_that_fails_is_tried_again_by_the_next_good_pass() -> None:
    fail = {"passes": 3, "clears": 1}
    reports: list[str | None] = []
    passes: list[int] = []

    def pass_fn(_ns: str, _name: str, _s: State) -> Outcome:
        passes.append(1)
        if fail["passes"] > 0:
            fail["passes"] -= 1
            raise RuntimeError("boom")
        return Outcome(requeue_after=0.01)

    def report(_ns: str, _name: str, message: str | None) -> None:
        if message is None and fail["clears"] > 0:
            fail["clears"] -= 1
            raise KubeError(503, "ServiceUnavailable", "etcd leader changed")
        reports.append(message)

    async def main() -> None:
        loops: Loops[State] = Loops("Example", State)
        loops.bind(pass_fn, settle=0, resync=30, report=report,
                   policy=ErrorPolicy(first_delay=0.01, max_delay=0.01, report_after=3))
        loops.ensure("ns", "a")
        await until("the error cleared", lambda: reports[-1:] == [None])
        count = len(passes)
        await until("more good passes", lambda: len(passes) >= count + 5)
        await loops.shutdown()

    run(main)
    assert reports[0] is not None and reports.count(None) == 1, reports


def test_a_burst_during_the_settle_costs_one_pass() -> None:
    rec = Recorder()

    async def main() -> None:
        loops = make(rec.record, settle=0.2)
        loops.ensure("ns", "a")
        await until("first pass", lambda: len(rec.calls) == 1)
        loops.wake("ns", "a")  # the wait returns, the settle begins
        await asyncio.sleep(0.05)
        for _ in range(50):  # lands during the settle: the coming pass sees it
            loops.wake("ns", "a")
        await until("second pass", lambda: len(rec.calls) == 2)
        await asyncio.sleep(0.5)
        assert len(rec.calls) == 2
        await loops.shutdown()

    run(main)


def test_a_wakeup_for_an_object_without_a_loop_is_dropped() -> None:
    async def main() -> None:
        loops = make(Recorder().record)
        loops.wake("ns", "deleted-long-ago")  # its Jobs going with it
        assert not loops.wakeups._events and not loops.wakeups._now
        await loops.shutdown()

    run(main)


def test_on_end_follows_the_objects_loop_not_a_successors() -> None:
    ended: list[str] = []
    release = threading.Event()
    rec = Recorder()

    async def main() -> None:
        loops: Loops[State] = Loops("Example", State,
                                    on_end=lambda ns, name: ended.append(f"{ns}/{name}"))
        loops.bind(rec.first_blocks(release), settle=0.01, resync=30)
        loops.on_object_event(None, body("a"))
        await until("a pass in flight", lambda: len(rec.calls) == 1)
        loops.on_object_event("DELETED", body("a"))
        loops.on_object_event("ADDED", body("a"))  # re-created while the pass runs
        release.set()
        await until("the successor's pass", lambda: len(rec.calls) == 2)
        await asyncio.sleep(0.05)
        assert ended == []  # the old loop ended, but a new one took the object
        loops.on_object_event("DELETED", body("a"))
        await until("the end", lambda: ended == ["ns/a"])
        await loops.shutdown()

    run(main)


def test_passes_run_at_most_as_many_at_once_as_the_client_has_connections() -> None:
    from nightshift.kube import CONNECTIONS

    rec = Recorder()
    release = threading.Event()
    threads: set[str] = set()

    def pass_fn(_ns: str, name: str, _s: State) -> Outcome:
        threads.add(threading.current_thread().name)
        rec.enter(name)
        release.wait(5)
        rec.leave()
        return Outcome()

    async def main() -> None:
        loops = make(pass_fn)
        for i in range(CONNECTIONS + 4):
            loops.ensure("ns", f"run-{i}")
        await until("the pool full", lambda: rec.active == CONNECTIONS)
        await asyncio.sleep(0.2)  # the others wait for a thread, whatever the CPU count
        assert rec.active == CONNECTIONS
        release.set()
        await until("every object's pass", lambda: len(set(rec.calls)) == CONNECTIONS + 4)
        await loops.shutdown()

    run(main)
    assert rec.max_active == CONNECTIONS
    assert all(t.startswith("nightshift-pass") for t in threads), threads


def test_a_replaced_loop_never_takes_its_successors_wakeups() -> None:
    # The run is deleted and re-created while a pass runs: the old loop ends after its
    # pass. A wake-up for the new loop's object (a stage Job finished) that lands during
    # the new loop's first pass must run its next pass, not end the old loop's wait.
    calls: list[float] = []
    release = threading.Event()

    def pass_fn(_ns: str, _name: str, _s: State) -> Outcome:
        calls.append(time.monotonic())
        if len(calls) == 1:
            release.wait(5)
        elif len(calls) == 2:
            time.sleep(0.3)
        return Outcome()

    async def main() -> None:
        loops = make(pass_fn, settle=0.01)
        loops.on_object_event(None, body("a"))
        await until("first pass", lambda: len(calls) == 1)
        loops.on_object_event("DELETED", body("a"))
        loops.on_object_event("ADDED", body("a"))
        release.set()
        await until("the new loop's pass", lambda: len(calls) == 2)
        await asyncio.sleep(0.1)
        loops.wake("ns", "a", now=True)
        await until("the pass it asked for", lambda: len(calls) == 3, timeout=3)
        await loops.shutdown()

    run(main)


def test_the_loops_gauge_counts_a_stopping_loop_until_its_pass_in_flight_ends() -> None:
    """A paused operator (cli/operator.py) stops every loop; test_install reads the gauge
    at 0 as "no pass can write now". It counted loops not stopping, so the end of one
    object's loop set it to 0 while another's pass, stopped mid-flight, had yet to
    write its status."""
    from nightshift import metrics

    rec = Recorder()
    release = threading.Event()

    def pass_fn(_ns: str, name: str, state: State) -> Outcome:
        rec.enter(name)
        try:
            if name == "slow":
                release.wait(5)
        finally:
            rec.leave()
        return Outcome()

    def gauge() -> float:
        return metrics.LOOPS.labels("Example")._value.get()  # type: ignore[no-any-return]

    async def main() -> None:
        loops = make(pass_fn)
        loops.on_object_event(None, body("slow"))
        loops.on_object_event(None, body("quick"))
        await until("both passes began", lambda: set(rec.calls) == {"slow", "quick"})
        await until("the quick pass ended", lambda: rec.active == 1)
        assert gauge() == 2
        for name in ("slow", "quick"):
            loops.stop("ns", name)
        await until("the quick loop ended", lambda: loops.key("ns", "quick")
                    not in loops._loops)
        await asyncio.sleep(0.05)
        assert gauge() == 1, "the slow loop's pass is still in flight"
        release.set()
        await until("the gauge reads 0", lambda: gauge() == 0)
        assert rec.active == 0
        await loops.shutdown()

    run(main)
