"""Why a Pending pod does not start, read from its status alone. Pure.

The kubelet and the scheduler say it only on the pod: an image that cannot be pulled, a
container that cannot be created, no node that fits. Each kind turns this into a line on
its own object, naming the field to check (pipelinerun/stalled.py, sharedstorage/plantypes.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nightshift.api import refusals

# Container waiting reasons that do not clear by themselves: the kubelet retries a pull,
# but a wrong name, a missing tag or a private registry without credentials stays so.
IMAGE = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                   "ErrImageNeverPull"})
CONFIG = frozenset({"CreateContainerConfigError", "CreateContainerError",
                    "RunContainerError"})
UNSCHEDULABLE = "Unschedulable"
# A container the kubelet restarts after each exit: a daemon whose setting is wrong
# (restartPolicy Always) runs in a loop, its pod Running and never Ready.
CRASH_LOOP = "CrashLoopBackOff"
# A daemon that runs, not ready, and says why through its readiness probe: the kubelet
# puts the probe's output in an Unhealthy event ("Readiness probe failed: <output>").
UNHEALTHY = "Unhealthy"
NOT_MOUNTED = "NotMounted"
_PROBE_FAILED = "Readiness probe failed:"
# What is kept of a crashed container's termination message (its last log lines, with
# FallbackToLogsOnError): the line that says why, not the exit banner after it.
LAST_WORDS = 240
_WHY = re.compile(r"fatal|error|fail|cannot|can't|unable|denied|not found|invalid", re.I)
# A log line's leading date and time ("2026/11/29 06:15:13|", "2026-11-29T06:15:13Z"):
# it changes with every crash, and a status that quotes it would be written each time.
_STAMP = re.compile(r"^\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\|?\s*")


@dataclass(frozen=True)
class NotStarting:
    pod: str
    reason: str  # the kubelet's (a container's waiting reason) or the scheduler's
    message: str
    container: str = ""  # "" when no node takes the pod

    @property
    def image(self) -> bool:
        return self.reason in IMAGE

    @property
    def unschedulable(self) -> bool:
        return self.reason == UNSCHEDULABLE

    @property
    def crash_loop(self) -> bool:
        return self.reason == CRASH_LOOP

    @property
    def not_mounted(self) -> bool:
        return self.reason == NOT_MOUNTED

    def text(self) -> str:
        if self.unschedulable:
            return f"pod {self.pod} is not scheduled: {self.message or 'no node fits'}"
        said = f"{self.reason}: {self.message}" if self.message else self.reason
        return f"pod {self.pod} container {self.container}: {said}"


def ready(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def not_starting(pod: Mapping[str, Any]) -> NotStarting | None:
    """What keeps a Pending pod from starting, or None while it is merely starting."""
    status = pod.get("status") or {}
    name = str((pod.get("metadata") or {}).get("name", ""))
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in IMAGE or reason in CONFIG:
            return NotStarting(name, str(reason), str(waiting.get("message") or ""),
                               str(cs.get("name")))
    for c in status.get("conditions") or []:
        if (c.get("type") == "PodScheduled" and c.get("status") == "False"
                and c.get("reason") == UNSCHEDULABLE):
            return NotStarting(name, UNSCHEDULABLE, str(c.get("message") or ""))
    return None


def crash_looping(pod: Mapping[str, Any]) -> NotStarting | None:
    """A container of a Running pod that keeps exiting, with how it last ended (its exit
    code and the end of its last words), or None. Read from Running pods: the kubelet
    keeps a restarting pod Running."""
    status = pod.get("status") or {}
    name = str((pod.get("metadata") or {}).get("name", ""))
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        if ((cs.get("state") or {}).get("waiting") or {}).get("reason") != CRASH_LOOP:
            continue
        last = (cs.get("lastState") or {}).get("terminated") or {}
        said = (f"it exits with code {last['exitCode']}" if "exitCode" in last
                else "it exits")
        words = last_words(str(last.get("message") or ""))
        return NotStarting(name, CRASH_LOOP, f"{said}: {words}" if words else said,
                           str(cs.get("name")))
    return None


def probe_says(events: Sequence[Mapping[str, Any]], now: datetime) -> str | None:
    """What a container's readiness probe printed when it last failed, from its
    Unhealthy events of the last refusals.EVENT_WINDOW seconds, or None (none, or the
    probe printed nothing). The kubelet folds the same output into one event."""
    newest = refusals.latest([e for e in events if e.get("reason") == UNHEALTHY
                              and str(e.get("message") or "").startswith(_PROBE_FAILED)], now)
    if newest is None:
        return None
    said = last_words(str(newest.get("message") or "").removeprefix(_PROBE_FAILED))
    return said or None


def last_words(message: str) -> str:
    """The lines of a termination message that say why (an error, a failure), else its
    last line; without their dates, joined, at most LAST_WORDS characters (the end)."""
    lines = [_STAMP.sub("", line).strip() for line in message.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    words = "; ".join([line for line in lines if _WHY.search(line)] or lines[-1:])
    return words if len(words) <= LAST_WORDS else "…" + words[-(LAST_WORDS - 1):]
