"""A failed pod as the run's status keeps it (`stages[].failureSamples`). Pure.

The reconcile pass (observe.py) reads a few failed pods of a stage whose Job's failure
count moved; this says which item, which exit code, the kubelet's reason and the end of the message
(the container's termination message, or its log's last lines with
FallbackToLogsOnError).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nightshift.api import names

# The runner's and run.sh's own last line: it names the field or path first and the
# fix last (runner/sidecar.py caps its why at 600 characters), so it is kept whole.
OWN_LINE_PREFIXES = ("nightshift: ", "stage-in failed (")
OWN_LINE_LIMIT = 700
TAIL_LIMIT = 240
# The most a sample's message holds (the status keeps it as it is).
MESSAGE_LIMIT = max(OWN_LINE_LIMIT, TAIL_LIMIT)


def message_tail(text: str, limit: int = TAIL_LIMIT) -> str:
    """A failure message's end, whole lines where they fit: a log tail's last lines say
    why a step failed, its first ones rarely do. A last line of our own is kept whole
    (up to OWN_LINE_LIMIT), whatever came before it."""
    text = text.strip()
    last = text.rsplit("\n", 1)[-1]
    if last.startswith(OWN_LINE_PREFIXES) and len(last) > limit:
        cut = "…" if last != text else ""
        room = OWN_LINE_LIMIT - len(cut)
        return cut + (last if len(last) <= room else last[:room - 1] + "…")
    if len(text) <= limit:
        return text
    start = len(text) - (limit - 1)
    cut = text[start:]
    nl = cut.find("\n")
    if text[start - 1] != "\n" and 0 <= nl < len(cut) - 1:
        cut = cut[nl + 1:]  # cut mid-line: start at the next whole line
    return "…" + cut


def _controller(pod: Mapping[str, Any]) -> str:
    """The name of the Job that controls `pod` (stage pods carry no job-name label)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job":
            return str(ref.get("name") or "")
    return ""


def failure_sample(pod: dict[str, Any]) -> dict[str, Any]:
    ann = pod["metadata"].get("annotations") or {}
    status = pod.get("status") or {}
    exit_code: int | None = None
    reason = status.get("reason") or ""
    message = status.get("message") or ""
    # The kubelet's own eviction (its scratch or ephemeral storage past the limit) says
    # why on the pod; the containers it killed say only "Error" and their last lines.
    evicted = reason == "Evicted"
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            exit_code = int(term["exitCode"])
            if not evicted:
                reason = term.get("reason") or reason
                message = term.get("message") or message
            break
    return {
        "index": int(ann.get(names.JOB_COMPLETION_INDEX, -1)),
        "exitCode": exit_code,
        "reason": reason,
        "message": message_tail(message),
        "pod": pod["metadata"]["name"],
        "job": _controller(pod),
    }
