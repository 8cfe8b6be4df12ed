"""What the local cluster's Karpenter did during a failed session, in a few lines.

CI hands back only the suite's printed output; the parts' logs stay in the clone. When a
test fails, this digest goes under it: Karpenter's disruption decisions (why it removed
or replaced nodes) and its errors, counted, with the newest example of each. Session
30's smoke-test timeout would have shown "Drifted ... replace" for every node at once.
Routine refusals of unschedulable pods ("could not schedule pod") are left out: they
are most of its errors and the runs' own statuses quote them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

ROUTINE = ("could not schedule pod",)
SHOWN = 10
_QUOTED = re.compile(r'"[^"]*"')
_DETAILS = re.compile(r" \([^()]*\)")


def _key(entry: dict[str, object]) -> str | None:
    message = str(entry.get("message", ""))
    if message in ROUTINE:
        return None
    if message == "disrupting node(s)":
        # command "Drifted/<uuid>: replace: nodepools=[...]: ...", decision "replace"
        reason = str(entry.get("command", "")).partition("/")[0]
        return f"disrupting node(s): {reason}: {entry.get('decision', '')}"
    if entry.get("level") == "ERROR":
        # One line per kind of error, not per object: names and details folded.
        error = _DETAILS.sub("", _QUOTED.sub('"…"', str(entry.get("error", ""))))[:120]
        return f"{entry.get('controller', '')}: {message}: {error}"
    return None


def karpenter_digest(lines: Iterable[str], since: datetime) -> list[str]:
    """One line per kind of event since `since`: count, kind, newest example's time."""
    counts: Counter[str] = Counter()
    newest: dict[str, str] = {}
    for line in lines:
        try:
            entry = json.loads(line)
            at = datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00"))
        except (ValueError, KeyError, TypeError):
            continue
        if at < since or (key := _key(entry)) is None:
            continue
        counts[key] += 1
        newest[key] = str(entry["time"])
    return [f"{n:6d} x {key} (last {newest[key]})" for key, n in counts.most_common(SHOWN)]


def karpenter_log_digest(log: Path, since: datetime) -> list[str]:
    if not log.exists():
        return []
    with log.open(errors="replace") as f:
        return karpenter_digest(f, since)
