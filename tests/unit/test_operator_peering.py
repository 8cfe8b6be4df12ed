"""Peering in cli/operator.py: priorities, and the engine's loops following kopf's pause
(kopf's own ToggleSet, peering decision and spawn_tasks; no cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import kopf
import pytest
from kopf._cogs.aiokits.aiotoggles import ToggleSet
from kopf._cogs.structs import bodies, references
from kopf._core.engines import peering as kopf_peering

from nightshift.cli import operator as op
from nightshift.engine.loop import Loops, Outcome


@dataclass
class State:
    passes: int = 0


def make_loops() -> Loops[State]:
    loops: Loops[State] = Loops("Example", State)

    def one_pass(_ns: str, _name: str, state: State) -> Outcome:
        state.passes += 1
        return Outcome(requeue_after=0.02)  # a busy loop: it only ends when stopped

    loops.bind(one_pass, settle=0.01, resync=0.05)
    return loops


async def until(what: str, cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_older_replicas_have_higher_priority_and_same_millisecond_replicas_differ() -> None:
    old, new = op.peering_priority(1_700_000_000_000, 999), op.peering_priority(
        1_700_000_000_001, 0)
    assert old > new
    assert op.peering_priority(5, 1) != op.peering_priority(5, 2)
    # Priorities go into the peering object's status as JSON numbers: exact in a double.
    assert abs(op.peering_priority(4_102_444_800_000, 999)) < 2 ** 53
    with pytest.raises(ValueError, match=r"0\.\.999"):
        op.peering_priority(5, 1000)


def test_peering_arguments_from_the_environment() -> None:
    assert op.peering_from_env({}) == {"standalone": True}
    assert op.peering_from_env({op.ENV_PEERING: "  "}) == {"standalone": True}
    args = op.peering_from_env({op.ENV_PEERING: "nightshift"}, now_ms=1_700_000_000_000)
    assert args["standalone"] is False and args["peering_name"] == "nightshift"
    assert -1_700_000_000_000_999 <= args["priority"] <= -1_700_000_000_000_000


def test_loops_stop_while_paused_and_run_again_after_resume() -> None:
    async def main() -> None:
        loops = make_loops()
        paused = ToggleSet(any)
        toggle = await paused.make_toggle(False, name="peering")
        follower = asyncio.create_task(op.follow_pause(paused, [loops]))
        loops.ensure("ns", "a")
        loops.ensure("ns", "b")
        await until("two loops", lambda: len(loops.running()) == 2)

        await toggle.turn_to(True)
        await until("loops stopped by the pause", lambda: not loops._loops)
        # An event already inside kopf's workers when the pause came starts a loop:
        # it is stopped again while the pause lasts.
        loops.ensure("ns", "sneaked")
        await until("the sneaked loop stopped", lambda: not loops._loops,
                    timeout=op.RESTOP_INTERVAL + 2)

        await toggle.turn_to(False)
        await asyncio.sleep(0)  # the follower sees the resume first, as in kopf
        loops.ensure("ns", "a")  # kopf's re-listing after the resume
        await asyncio.sleep(op.RESTOP_INTERVAL + 0.5)
        assert loops.running() == [("Example", "ns", "a")]
        state = loops.states()[("Example", "ns", "a")]
        before = state.passes
        await until("passes after the resume", lambda: state.passes > before)

        follower.cancel()
        await loops.shutdown()

    asyncio.run(main())


PEERINGS = references.Resource(group="kopf.dev", version="v1", plural="clusterkopfpeerings",
                               namespaced=False)
ME = kopf_peering.Identity("me")


def peering_event(peers: dict[str, int]) -> bodies.RawEvent:
    now = datetime.datetime.now(datetime.UTC).isoformat()
    return cast(bodies.RawEvent, {"type": "MODIFIED", "object": {
        "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
        "metadata": {"name": "nightshift"},
        "status": {ident: {"priority": prio, "lifetime": 60, "lastseen": now}
                   for ident, prio in peers.items()}}})


def test_kopfs_own_peering_decision_stops_and_restarts_the_engine() -> None:
    """kopf's process_peering_event decides; the engine follows its toggle."""
    async def main() -> None:
        settings = kopf.OperatorSettings()
        settings.peering.name = "nightshift"
        settings.peering.priority = op.peering_priority(1_700_000_000_500, 7)
        loops = make_loops()
        paused = ToggleSet(any)
        conflicts = await paused.make_toggle(False, name="nightshift@None")
        follower = asyncio.create_task(op.follow_pause(paused, [loops]))
        loops.ensure("ns", "run")
        await until("the loop", lambda: bool(loops.running()))

        async def event(peers: dict[str, int]) -> None:
            # kopf sleeps until the blocking peers' deadline after deciding: only the
            # decision is wanted here.
            task = asyncio.create_task(kopf_peering.process_peering_event(
                raw_event=peering_event(peers), namespace=None, resource=PEERINGS,
                identity=ME, settings=settings, autoclean=False,
                conflicts_found=conflicts))
            await asyncio.sleep(0.05)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        mine = settings.peering.priority
        # A younger replica (lower priority) changes nothing.
        await event({"me": mine, "young": op.peering_priority(1_700_000_000_900, 0)})
        assert conflicts.is_off() and loops.running()
        # An older one, presumed dead and back: kopf pauses us, and the engine stops.
        await event({"me": mine, "old": op.peering_priority(1_700_000_000_100, 0)})
        assert conflicts.is_on()
        await until("the engine paused", lambda: not loops._loops)
        # It goes away: kopf resumes; its re-listing restarts the loop, which stays.
        await event({"me": mine})
        assert conflicts.is_off()
        await asyncio.sleep(0)
        loops.ensure("ns", "run")
        await asyncio.sleep(op.RESTOP_INTERVAL + 0.3)
        assert loops.running() == [("Example", "ns", "run")]

        follower.cancel()
        await loops.shutdown()

    asyncio.run(main())


def test_same_priority_pauses_everyone_in_kopf() -> None:
    """Why priorities must differ: kopf pauses every replica that sees an equal one."""
    async def main() -> None:
        settings = kopf.OperatorSettings()
        settings.peering.name = "nightshift"
        settings.peering.priority = 0
        paused = ToggleSet(any)
        conflicts = await paused.make_toggle(False)
        task = asyncio.create_task(kopf_peering.process_peering_event(
            raw_event=peering_event({"me": 0, "twin": 0}), namespace=None, resource=PEERINGS,
            identity=ME, settings=settings, autoclean=False, conflicts_found=conflicts))
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert paused.is_on()

    asyncio.run(main())


def test_kopfs_spawn_tasks_hands_its_pause_set_to_the_follower(
        caplog: pytest.LogCaptureFixture) -> None:
    """The hook on kopf's orchestrator engages with the installed kopf: the set it gets
    is the one kopf's orchestrator adds its pause toggles to."""
    async def main() -> None:
        loops = make_loops()
        with op.engine_follows_pause([loops]) as seen:
            tasks = await kopf.spawn_tasks(
                registry=kopf.OperatorRegistry(), standalone=False, peering_name="nightshift",
                priority=-1, clusterwide=True, settings=kopf.OperatorSettings())
            try:
                await until("kopf's orchestrator", lambda: bool(seen) and any(
                    t.name == "peering CRD is missing" for t in seen[0]))  # type: ignore[attr-defined]
                assert isinstance(seen[0], ToggleSet)
                assert any(t.get_name() == "nightshift: engine follows kopf's pause"
                           for t in asyncio.all_tasks())
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                loop = asyncio.get_running_loop()
                for sig in (2, 15):
                    loop.remove_signal_handler(sig)

    with caplog.at_level(logging.CRITICAL):
        asyncio.run(main())
    from kopf._core.reactor import orchestration
    assert orchestration.orchestrator.__module__ == "kopf._core.reactor.orchestration"


def test_the_chart_sets_the_variable_the_operator_reads() -> None:
    from tests.unit.test_chart_lint import NIGHTSHIFT, render

    def env(values: dict[str, object]) -> dict[str, str]:
        (deploy,) = [d for d in render(NIGHTSHIFT, values) if d["kind"] == "Deployment"]
        return {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"][
            "containers"][0]["env"]}

    on = env({})
    assert op.peering_from_env(on)["peering_name"] == "nightshift"
    assert "POD_ID" in on  # kopf's identity of the replica (a fieldRef: no value here)
    assert op.peering_from_env(env({"peering.enabled": False})) == {"standalone": True}


def test_own_identity_never_needs_a_passwd_entry() -> None:
    from nightshift.cli.operator import own_identity

    assert own_identity({"POD_ID": "nightshift-abc"}) == "nightshift-abc"
    # Without POD_ID: host and PID, not getpass.getuser() (which raises KeyError for a
    # uid without a passwd entry, as the chart's 65532 in the operator image).
    assert "/" in own_identity({})


def test_a_bad_setting_exits_at_once_saying_which(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # kopf would retry the failed startup each minute, the pod Running, nothing done.
    def never(**_: object) -> None:
        raise AssertionError("kopf.run with a bad configuration")

    monkeypatch.setattr(kopf, "run", never)
    monkeypatch.setenv("NIGHTSHIFT_CLUSTER_CIDRS", "10.0.0.1/16")
    assert op.run_operator(namespaces=["x"], health_port=0) == 2
    err = capsys.readouterr().err
    assert err.startswith("nightshift operator: bad configuration: NIGHTSHIFT_CLUSTER_CIDRS: "
                          "10.0.0.1/16 has host bits set")


@pytest.mark.parametrize(("name", "value", "said"), [
    ("NIGHTSHIFT_RESYNC", "5m", "NIGHTSHIFT_RESYNC: '5m' is not a number of seconds, "
                                "without a unit"),
    ("NIGHTSHIFT_METRICS_PORT", "80.5", "NIGHTSHIFT_METRICS_PORT: '80.5' is not a port number"),
    ("NIGHTSHIFT_LB_GRACE", "-1", "NIGHTSHIFT_LB_GRACE: '-1' must be a number of seconds, "
                                  "without a unit, 0 or more"),
])
def test_a_bad_number_names_its_variable(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str], name: str,
                                         value: str, said: str) -> None:
    monkeypatch.setattr(kopf, "run", lambda **_: None)
    monkeypatch.setenv(name, value)
    assert op.run_operator(namespaces=["x"], health_port=0) == 2
    assert f"bad configuration: {said}; fix it" in capsys.readouterr().err
