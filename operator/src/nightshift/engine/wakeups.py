"""Wake-ups for per-object reconcile loops.

Watch events on the objects a loop owns (Jobs, nodes, NodeClaims) only *wake* that
loop: however many arrive while it waits or runs, the next wait returns once, so a
burst of events coalesces into one pass and API writes stay O(passes), not O(events).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

Key = tuple[str, str, str]  # (kind, namespace, name)


class Wakeups:
    def __init__(self) -> None:
        self._events: defaultdict[Key, asyncio.Event] = defaultdict(asyncio.Event)

    def wake(self, key: Key) -> None:
        self._events[key].set()

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

    def forget(self, key: Key) -> None:
        self._events.pop(key, None)
