"""Pure decoding for `kubectl nightshift items` and `logs`: item values, states, pods.

Everything here works on objects already read (the run, the stage's item ConfigMaps,
its Jobs, pods of one item), so it is unit-testable on hand-built objects and never
decides what to read; plugin.py does the reading, O(stages) calls, never all pods.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightshift.api import names, ranges
from nightshift.pipelinerun import items as itemsmod
from nightshift.pipelinerun import progress as pg

# The label the Job controller puts on every pod of an Indexed Job (Kubernetes >= 1.28).
LABEL_COMPLETION_INDEX = names.JOB_COMPLETION_INDEX

SUCCEEDED = "succeeded"
FAILED = "failed"
UNFINISHED = "unfinished"  # the latest attempt is still going: running or waiting
NOT_RUN = "not-run"  # the latest attempt ended (or was cancelled) without finishing it
PENDING = "pending"  # the stage has not started
UNKNOWN = "unknown"  # the stage's Jobs are gone: the status keeps counts, not items
STATES = (SUCCEEDED, FAILED, UNFINISHED, NOT_RUN, PENDING, UNKNOWN)


@dataclass(frozen=True)
class Chunk:
    """One frozen items ConfigMap, as its metadata describes it."""

    name: str
    start: int
    count: int


def item_chunks(metas: Sequence[Mapping[str, Any]], run: str, stage: str) -> list[Chunk]:
    """The stage's item chunks from a metadata-only list of the run's ConfigMaps.

    Only the deterministic chunk names count (0, 1, ... until one is missing), as the
    operator itself reads them; retry `indexes` ConfigMaps share the labels."""
    by_name = {str((m.get("metadata") or m).get("name")): (m.get("metadata") or m)
               for m in metas}
    out: list[Chunk] = []
    while (name := itemsmod.items_configmap_name(run, stage, len(out))) in by_name:
        ann = by_name[name].get("annotations") or {}
        out.append(Chunk(name, int(ann.get(names.ANNOTATION_ITEM_START, "0")),
                         int(ann.get(names.ANNOTATION_ITEM_COUNT, "0"))))
    return out


def chunks_for(chunks: Sequence[Chunk], indexes: Sequence[int] | None) -> list[Chunk]:
    """The chunks that hold `indexes` (all of them for None): what to GET."""
    if indexes is None:
        return list(chunks)
    wanted = set()
    starts = [c.start for c in chunks]
    for i in indexes:
        k = bisect.bisect_right(starts, i) - 1
        if k >= 0 and i < chunks[k].start + chunks[k].count:
            wanted.add(k)
    return [chunks[k] for k in sorted(wanted)]


class ItemList:
    """Item values by original index, from the chunk ConfigMaps that were read."""

    def __init__(self, configmaps: Sequence[Mapping[str, Any]]) -> None:
        self._parts: list[tuple[int, list[str]]] = []
        for cm in configmaps:
            for key, text in (cm.get("data") or {}).items():
                start = _chunk_start(key)
                if start is not None:
                    self._parts.append((start, text.split("\n")[:-1] if text else []))
        self._parts.sort(key=lambda p: p[0])
        self._starts = [s for s, _ in self._parts]

    def get(self, index: int) -> str | None:
        k = bisect.bisect_right(self._starts, index) - 1
        if k < 0:
            return None
        start, lines = self._parts[k]
        return lines[index - start] if index - start < len(lines) else None

    def index_of(self, item: str) -> int | None:
        for start, lines in self._parts:
            try:
                return start + lines.index(item)
            except ValueError:
                continue
        return None

    def __len__(self) -> int:
        return sum(len(lines) for _, lines in self._parts)


def _chunk_start(key: str) -> int | None:
    if key == names.ITEMS_KEY:
        return 0
    base, dot, digits = key.partition(".")
    if base == names.ITEMS_KEY and dot and digits.isdigit():
        return int(digits)
    return None


def stage_jobs(jobs: Sequence[Mapping[str, Any]], run: str, stage: str
               ) -> dict[int, Mapping[str, Any]]:
    """attempt -> Job, for the stage's own deterministically named Jobs only."""
    out: dict[int, Mapping[str, Any]] = {}
    for job in jobs:
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        try:
            attempt = int(labels.get(names.LABEL_ATTEMPT, "0"))
        except ValueError:
            continue
        if (labels.get(names.LABEL_STAGE) == stage
                and meta.get("name") == itemsmod.job_name(run, stage, attempt)):
            out[attempt] = job
    return out


def failed_from_status(record: Mapping[str, Any]) -> list[int] | None:
    """The latest attempt's failed items from the status, or None when the status cut
    the list short (failedItemsTruncated): then only the Jobs have them all."""
    if record.get("failedItemsTruncated"):
        return None
    return ranges.parse(record.get("failedItems"))


def trivially_succeeded(record: Mapping[str, Any]) -> bool:
    """Every item succeeded, so item states need no Job read."""
    total = int(record.get("total") or 0)
    return (record.get("phase") == pg.SUCCEEDED and not record.get("failed")
            and int(record.get("succeeded") or 0) == total)


def states(total: int, record: Mapping[str, Any], view: pg.StageView | None) -> list[str]:
    """Each item's state, index by index, from the stage's status and (when the stage
    has started and not simply succeeded) the progress its Jobs show."""
    if record.get("attempt") is None or record.get("phase") == pg.PENDING:
        return [PENDING] * total
    if trivially_succeeded(record):
        return [SUCCEEDED] * total
    if view is None:
        raise ValueError("item states of a started stage need its Jobs")
    latest = view.latest
    if latest is None:
        # Jobs deleted (the operator makes them again): only failures the status
        # lists in full are known.
        out = [UNKNOWN] * total
        for i in failed_from_status(record) or []:
            if i < total:
                out[i] = FAILED
        return out
    ended = latest.state in (pg.SUCCEEDED, pg.FAILED) or record.get("phase") == pg.CANCELLED
    out = [NOT_RUN if ended else UNFINISHED] * total
    for i in view.succeeded:
        if i < total:
            out[i] = SUCCEEDED
    for i in view.failed:
        if i < total:
            out[i] = FAILED
    return out


def item_rows(items: ItemList, indexes: Sequence[int], state_of: Sequence[str] | None,
              record: Mapping[str, Any], default_state: str = FAILED) -> list[dict[str, Any]]:
    """One row per index: its value, state, and the status's failure sample if any."""
    samples = {int(s.get("index", -1)): s for s in record.get("failureSamples") or []}
    rows = []
    for i in indexes:
        row: dict[str, Any] = {"index": i, "item": items.get(i),
                               "state": state_of[i] if state_of is not None else default_state}
        s = samples.get(i)
        if s is not None:
            for k in ("exitCode", "reason", "message"):
                if s.get(k) is not None and s.get(k) != "":
                    row[k] = s[k]
        rows.append(row)
    return rows


def format_rows(rows: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """`INDEX  STATE  ITEM  [exit N REASON: message]`, plain and fast at 10^5 rows."""
    width = max([len(str(r["index"])) for r in rows] + [5])
    yield f"{'INDEX':>{width}}  {'STATE':<10}  ITEM"
    for r in rows:
        item = r["item"] if r["item"] is not None else "?"
        line = f"{r['index']:>{width}}  {r['state']:<10}  {item}"
        why = []
        if r.get("exitCode") is not None:
            why.append(f"exit {r['exitCode']}")
        if r.get("reason"):
            why.append(str(r["reason"]))
        if why or r.get("message"):
            line += "  " + " ".join(why) + (f": {r['message']}" if r.get("message") else "")
        yield line


@dataclass(frozen=True)
class Where:
    """Where an item ran: the attempt's Job and the item's completion index in it."""

    attempt: int
    job: str
    completion_index: int


def stage_spec(run: Mapping[str, Any], stage: str) -> Mapping[str, Any]:
    """The run's spec of one stage; {} if it has none by that name."""
    return next((s for s in (run.get("spec") or {}).get("stages") or []
                 if s.get("name") == stage), {})


def locate(view: pg.StageView, index: int, attempt: int | None = None) -> Where:
    """The Job and completion index of item `index` in `attempt` (default: the latest
    attempt that ran it). Retry Jobs run only the items earlier attempts left, in
    ascending original index, so the item's position is its rank among them; a batched
    stage's pod runs `batch` positions, so the completion index is position // batch."""
    if not view.attempts:
        raise LookupError("the stage has no Job yet")
    candidates = [a for a in view.attempts if attempt is None or a.attempt == attempt]
    if not candidates:
        known = ", ".join(str(a.attempt) for a in view.attempts)
        raise LookupError(f"no attempt {attempt}; the stage's attempts are {known}")
    for av in reversed(candidates):
        batch = max(1, av.batch)
        if av.indexes is None:
            if index < av.completions or av.completions == 0:
                return Where(av.attempt, av.name, index // batch)
            continue
        k = bisect.bisect_left(av.indexes, index)
        if k < len(av.indexes) and av.indexes[k] == index:
            return Where(av.attempt, av.name, k // batch)
    raise LookupError(f"item {index} was not run by attempt {attempt}" if attempt is not None
                      else f"item {index} is beyond the stage's {view.total} items")


# The MPI Operator's label on an MPIJob's pods; the launcher runs mpirun and logs the
# program's output.
MPI_ROLE = "training.kubeflow.org/job-role"


def pod_selector(run: str, stage: str, where: Where, mpi: bool = False) -> str:
    """The pods of one item in one attempt: the attempt's labels (its Job's selector)
    and the item's completion index; for an mpi stage (one item), its launcher."""
    which = {MPI_ROLE: "launcher"} if mpi else {
        LABEL_COMPLETION_INDEX: str(where.completion_index)}
    return itemsmod.label_selector({**itemsmod.attempt_labels(run, stage, where.attempt),
                                    **which})


def newest_pod(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The latest pod of an index: per-item retries make one pod each."""
    return max(pods, key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "",
                                    (p.get("metadata") or {}).get("name") or ""), default=None)


def pick_container(pod: Mapping[str, Any], previous: bool = False) -> str | None:
    """The step whose log answers "why": the first that exited non-zero (steps are init
    containers but the last), else the main container, the last step."""
    status = pod.get("status") or {}
    state_key = "lastState" if previous else "state"
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        term = (cs.get(state_key) or {}).get("terminated") or {}
        if term.get("exitCode", 0) != 0:
            return str(cs["name"])
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(containers[-1]["name"]) if containers else None


def container_names(pod: Mapping[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    return [str(c["name"]) for c in [*(spec.get("initContainers") or []),
                                     *(spec.get("containers") or [])]]
