"""The API server's audit log as the benches read it: a run's writes, by whom and where.

The local cluster audits every write at Metadata level (hack/audit-policy.yaml); a bench
marks the log's end before a run and reads the entries after it.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any


class Audit:
    """Reads the API server's audit log from an offset: entries since a mark."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def since(self, offset: int) -> list[dict[str, Any]]:
        files = [(self.path, offset)]
        if self.path.stat().st_size < offset:
            # Rotated since the mark: the rest of the old file, then all of the new one.
            rotated = sorted(self.path.parent.glob("audit-*.log"), key=lambda p: p.stat().st_mtime)
            if not rotated:
                raise RuntimeError("the audit log was rotated and its backup is gone")
            files = [(rotated[-1], offset), (self.path, 0)]
        out = []
        for path, start in files:
            with path.open("rb") as f:
                f.seek(start)
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        return out


def ts(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(
        entry["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


# The audit log's write verbs; a deletecollection names no single object.
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
OBJECT_WRITES = WRITES - {"deletecollection"}


def foreign_writes(entries: list[dict[str, Any]], namespaces: tuple[str, ...]) -> int:
    """API writes during a run by anyone, in any namespace but the bench's own: others'
    tests on the same cluster cost its parts CPU that looks like the bench's."""
    return sum(1 for e in entries
               if e.get("verb") in WRITES
               and e.get("stage") == "ResponseComplete"
               and (e.get("objectRef") or {}).get("namespace") not in namespaces
               and (e.get("objectRef") or {}).get("resource") not in ("leases", "nodes"))


def pod_writes(entries: list[dict[str, Any]], namespace: str, subresource: str | None,
               verb: str = "create") -> list[float]:
    """Times of successful pod writes (subresource None: the pod itself) in namespace."""
    out = []
    for e in entries:
        ref = e.get("objectRef") or {}
        if (e.get("verb") == verb and e.get("stage") == "ResponseComplete"
                and ref.get("resource") == "pods" and ref.get("namespace") == namespace
                and ref.get("subresource") == subresource
                and int((e.get("responseStatus") or {}).get("code", 0)) < 300):
            out.append(ts(e))
    return sorted(out)


def pod_work(entries: list[dict[str, Any]], namespace: str) -> dict[str, int]:
    """The pod writes a run caused in its namespace, by kind, and how many the API server
    refused with a conflict (a writer's retry): the same work should give the same counts,
    so a run that cost more CPU with the same counts did the same work more slowly."""
    out: dict[str, int] = {}
    for e in entries:
        ref = e.get("objectRef") or {}
        if (e.get("verb") not in OBJECT_WRITES
                or e.get("stage") != "ResponseComplete" or ref.get("resource") != "pods"
                or ref.get("namespace") != namespace):
            continue
        code = int((e.get("responseStatus") or {}).get("code", 0))
        key = "conflict" if code == 409 else f"{e['verb']} {ref.get('subresource') or 'pod'}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))
