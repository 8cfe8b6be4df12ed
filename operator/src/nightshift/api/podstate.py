"""Why a Pending pod does not start, read from its status alone. Pure.

The kubelet and the scheduler say it only on the pod: an image that cannot be pulled, a
container that cannot be created, no node that fits. Each kind turns this into a line on
its own object, naming the field to check (pipelinerun/stalled.py, sharedstorage/plan.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Container waiting reasons that do not clear by themselves: the kubelet retries a pull,
# but a wrong name, a missing tag or a private registry without credentials stays so.
IMAGE = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                   "ErrImageNeverPull"})
CONFIG = frozenset({"CreateContainerConfigError", "CreateContainerError",
                    "RunContainerError"})
UNSCHEDULABLE = "Unschedulable"


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

    def text(self) -> str:
        if self.unschedulable:
            return f"pod {self.pod} is not scheduled: {self.message or 'no node fits'}"
        said = f"{self.reason}: {self.message}" if self.message else self.reason
        return f"pod {self.pod} container {self.container}: {said}"


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
