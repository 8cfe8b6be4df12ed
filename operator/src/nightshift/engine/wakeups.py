"""Wake-ups for per-object reconcile loops.

Watch events on the objects a loop owns (Jobs, nodes, NodeClaims) only *wake* that
loop: however many arrive while it waits or runs, the next wait returns once, so a
burst of events coalesces into one pass and API writes stay O(passes), not O(events).

A loop lets a burst land (its settle interval) before it passes. A wake-up that marks
a transition someone waits on (a stage Job finished: the barrier to the next stage,
the run's end) asks for a pass *now* and cuts that settle short. Such transitions
happen a few times per object, so they never make passes O(events).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

Key = tuple[str, str, str]  # (kind, namespace, name)


class Wakeups:
    def __init__(self) -> None:
        self._events: defaultdict[Key, asyncio.Event] = defaultdict(asyncio.Event)
        self._now: defaultdict[Key, asyncio.Event] = defaultdict(asyncio.Event)

    def wake(self, key: Key, *, now: bool = False) -> None:
        self._events[key].set()
        if now:
            self._now[key].set()

    async def wait(self, key: Key, timeout: float) -> bool:
        """Wait for a wake-up or the timeout; True when woken."""
        ev = self._events[key]
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            ev.clear()
        return True

    async def settle(self, key: Key, seconds: float) -> bool:
        """Let a burst of wake-ups land for `seconds`, unless one asks for a pass now
        (before or during the wait); True when cut short."""
        try:
            await asyncio.wait_for(self._now[key].wait(), seconds)
        except TimeoutError:
            return False
        return True

    def passing(self, key: Key) -> None:
        """A pass starts: it sees every change so far, so it answers every wake-up
        before it (those of the settle interval included, which would otherwise cost a
        second pass). One arriving during the pass asks for the next."""
        self._now[key].clear()
        self._events[key].clear()

    def forget(self, key: Key) -> None:
        self._events.pop(key, None)
        self._now.pop(key, None)
