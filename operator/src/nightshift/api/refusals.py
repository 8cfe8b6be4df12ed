"""Pods the API server refused to create, as their controllers record it. Pure.

A full ResourceQuota, a LimitRange, the namespace's Pod Security level or an admission
webhook refuses a pod before it exists, so there is no pod to read: the refusal is only
in the creating controller's Warning events (the Job, DaemonSet and ReplicaSet
controllers' `FailedCreate` "Error creating: ...", the StatefulSet controller's "create
Pod ... failed error: ...", k8s.io/kubernetes pkg/controller) or, for a Deployment, in
its `ReplicaFailure` condition. Each kind turns the newest into a line on its own object
with the field to check (pipelinerun/stalled.py, sharedstorage/plan.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from nightshift.api.conditions import find

FAILED_CREATE = "FailedCreate"
# What the built-in controllers write before the API server's words, by event reason.
POD_CONTROLLERS: Mapping[str, Sequence[str]] = {
    FAILED_CREATE: (r"Error creating: ", r"create Pod \S+ in StatefulSet \S+ failed error: "),
}
# The Job controller retries a refused create with a backoff of up to minutes, and the
# API server folds the same refusal into one Event whose last time moves: an Event
# older than this says nothing of the present.
EVENT_WINDOW = 600.0
# Events read per object (one LIST by its uid or name): the recorder folds an object's
# repeated refusals into one Event after ten, so it holds a few dozen at most within the
# hour Events live; a LIST's limit takes them in name order, not time order, so it must
# take them all.
EVENTS_READ = 100

Kind = Literal["quota", "podsecurity", "limitrange", "other"]


def clean(said: str) -> str:
    """The API server's refusal without what changes from one retry to the next (the
    pod's generated name, the quota's current use, the recorder's fold), so the same
    refusal gives the same text and writes no new status."""
    said = said.strip().removeprefix("(combined from similar events): ")
    said = re.sub(r'^(pods|jobs\.batch) "[^"]*" is forbidden: ', "", said)
    return re.sub(r", used: \S+, limited: ", ", limited: ", said)


def kind(said: str) -> Kind:
    """Which of the namespace's guards refused: the fix differs for each."""
    if "exceeded quota" in said:
        return "quota"
    if "violates PodSecurity" in said:
        return "podsecurity"
    if " per Container is " in said or " per Pod is " in said:
        return "limitrange"
    return "other"


def terminating(said: str) -> bool:
    """Whether the API server refused a create because its namespace is being deleted."""
    return "being terminated" in said


def namespace_state(status: int, said: str) -> str | None:
    """What ends a write refused for the namespace's state, not the object's (a full
    ResourceQuota, a namespace being deleted), or None for any other answer: such a
    write is retried, not reported as the object's fault."""
    if status != 403:
        return None
    if kind(said) == "quota":
        return ("the namespace's ResourceQuota is full: raise it, or wait for other "
                "objects in the namespace to go")
    if terminating(said):
        return "the namespace is being deleted: nothing can be created in it"
    return None


def refusal(event: Mapping[str, Any], patterns: Mapping[str, Sequence[str]] = POD_CONTROLLERS
            ) -> tuple[str, str] | None:
    """(the pattern its message matched, the refusal, cleaned) for an event that carries
    one: `patterns` by event reason, each a regular expression for the words before the
    API server's. None for any other event."""
    said = str(event.get("message") or "").strip()
    said = said.removeprefix("(combined from similar events): ")
    for pattern in patterns.get(str(event.get("reason")), ()):
        if m := re.match(pattern, said):
            return pattern, clean(said[m.end():])
    return None


def newest(events: Sequence[Mapping[str, Any]], now: datetime,
           patterns: Mapping[str, Sequence[str]] = POD_CONTROLLERS,
           after: datetime | None = None) -> tuple[str, str] | None:
    """refusal() of the newest refusing event of the last EVENT_WINDOW seconds (and since
    `after`: not a same-named object's from before), or None."""
    found = latest([e for e in events if refusal(e, patterns) is not None], now, after)
    return None if found is None else refusal(found, patterns)


def latest(events: Iterable[Mapping[str, Any]], now: datetime | None = None,
           after: datetime | None = None) -> Mapping[str, Any] | None:
    """The newest of `events` by event_time (undated ones left out), since `after`; None
    for none, or, given `now`, when even that one is older than EVENT_WINDOW seconds."""
    dated = [(t, e) for e in events
             if (t := event_time(e)) is not None and (after is None or t >= after)]
    if not dated:
        return None
    when, found = max(dated, key=lambda te: te[0])
    return None if now is not None and (now - when).total_seconds() > EVENT_WINDOW else found


def event_time(event: Mapping[str, Any]) -> datetime | None:
    """When an Event last happened: its series, its last timestamp, its time, its birth."""
    for raw in ((event.get("series") or {}).get("lastObservedTime"), event.get("lastTimestamp"),
                event.get("eventTime"), (event.get("metadata") or {}).get("creationTimestamp")):
        if (when := parse_time(raw)) is not None:
            return when
    return None


def parse_time(raw: Any) -> datetime | None:
    """An API time (RFC 3339), or None for none or a malformed one."""
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw))
    except ValueError:
        return None


def replica_failure(obj: Mapping[str, Any]) -> str | None:
    """A Deployment's (or ReplicaSet's) refused pod create, from its ReplicaFailure
    condition (the ReplicaSet controller's error, which the Deployment controller copies
    up), cleaned; None while it creates its pods."""
    c = find((obj.get("status") or {}).get("conditions"), "ReplicaFailure")
    if c is None or c.get("status") != "True" or c.get("reason") != FAILED_CREATE:
        return None
    return clean(str(c.get("message") or ""))
