"""The commit sidecar's SIGTERM handler sets its stop event without taking the Event's
lock in the handler: a signal landing while the main thread holds it (inside
stop.wait()) must not hang the sidecar."""

from __future__ import annotations

import threading

from nightshift.runner.sidecar import on_signal_set


def _handler_inside_wait(set_it: object) -> threading.Event:
    """Run the handler as a signal would, in a thread that holds the Event's internal
    lock at that moment (as the main thread does inside Event.wait); return the event."""
    event = threading.Event()
    returned = threading.Event()

    def main_thread() -> None:
        with event._cond:  # type: ignore[attr-defined]  # Event.wait's critical section
            set_it(event)  # type: ignore[operator]
            returned.set()

    t = threading.Thread(target=main_thread, daemon=True)
    t.start()
    t.join(timeout=2)
    assert returned.is_set(), "the handler blocked on the lock its own thread holds"
    return event


def test_a_sigterm_inside_wait_does_not_deadlock_and_still_stops() -> None:
    event = _handler_inside_wait(on_signal_set)
    assert event.wait(timeout=2), "the stop event is set once the lock is free"


def test_the_plain_set_it_replaces_would_deadlock() -> None:
    # The reason for on_signal_set: Event.set() in the handler blocks forever here.
    event = threading.Event()
    returned = threading.Event()

    def main_thread() -> None:
        with event._cond:  # type: ignore[attr-defined]
            event.set()
            returned.set()

    threading.Thread(target=main_thread, daemon=True).start()
    assert not returned.wait(timeout=1)
