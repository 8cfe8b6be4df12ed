"""The few pod and event reads a PipelineRun pass makes, each only when its Jobs call for
it, and what the loop remembers of them between passes (lost on restart, harmlessly).

Never a list of a stage's pods: failure samples are read when a Job's failure count
moved (5 pods); a stalled Job's Pending pods or refusal events while it is stalled
(stalled.py), and the events of a Pending pod that waits for its volumes
(unmounted.py) or, on a VirtualCluster, that no node takes (unlaunched.py: whether
Karpenter found no node to launch); a running Job's Failed pods at most every evicted.READ_SECONDS
(evicted.py: the evictions its pod failure policy ignores, which nothing counts; a
pass is asked for when one is due). Besides pods: a stage's done set where its
succeededItems is cut (doneset.py), and the index map of a retry Job that keeps it in
its ConfigMaps, each once per loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nightshift.api import names, refusals
from nightshift.kube import Kube
from nightshift.pipelinerun import doneset, evicted, mpijob, stalled, unlaunched, unmounted
from nightshift.pipelinerun import items as itemsmod
from nightshift.pipelinerun.samples import failure_sample
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage

Found = dict[str, tuple[str, str]]  # stage -> (reason, message)


@dataclass
class PodReads:
    failed_seen: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Job -> its pods' stall: since when none is ready, when to read them next, why.
    stalls: dict[str, stalled.Stall] = field(default_factory=dict)
    # Job -> when its Failed pods are next read for evictions, and what they said.
    evictions: dict[str, tuple[float, tuple[str, str] | None]] = field(
        default_factory=dict)

    def failure_samples(self, kube: Kube, namespace: str, jobs: list[dict[str, Any]]
                        ) -> dict[str, list[dict[str, Any]]]:
        """A few failed pods per stage, re-read only when a Job's failure count moved."""
        for job in jobs:
            jname = job["metadata"]["name"]
            failed = int((job.get("status") or {}).get("failed") or 0)
            if failed == 0 or self.failed_seen.get(jname) == failed:
                continue
            stage = (job["metadata"].get("labels") or {}).get(names.LABEL_STAGE, jname)
            self.samples[stage] = [failure_sample(p)
                                   for p in _pods(kube, namespace, job, "Failed", 5)]
            self.failed_seen[jname] = failed
        return dict(self.samples)

    def held(self, kube: Kube, namespace: str, jobs: list[dict[str, Any]],
             spec: PipelineRunSpec | None, said: frozenset[str] = frozenset()) -> Found:
        """Why running stages do not move: their stalls (stalled.py) and, for a stage
        not stalled, items the kubelet evicts again and again (evicted.py).

        `said`: the stages whose status says they wait. A Job this loop has not seen yet
        (the operator restarted) is read at once there, not after the usual wait: the
        status would otherwise drop the reason for that long, then set it again with a
        second Warning event."""
        return {**self._evicted(kube, namespace, jobs, spec, said),
                **self._stalled(kube, namespace, jobs, spec, said)}

    def next_read(self) -> float | None:
        """Seconds until a Job is due a read: a pass then, not a resync later, so a stage
        says why STALL_SECONDS after its pods stopped, not up to twice that, and a Job's
        evictions are read every READ_SECONDS even when nothing else moves."""
        now = time.monotonic()
        due = [max(st.since + stalled.STALL_SECONDS, st.next_read) - now
               for st in self.stalls.values()]
        due += [at - now for at, _ in self.evictions.values()]
        return max(min(due), 1.0) if due else None

    def _evicted(self, kube: Kube, namespace: str, jobs: list[dict[str, Any]],
                 spec: PipelineRunSpec | None, said: frozenset[str]) -> Found:
        """A running stage Job's Failed pods (evicted.PODS_READ), first READ_SECONDS after
        it was first seen running, then every READ_SECONDS while it runs."""
        now, out, seen = time.monotonic(), {}, set()
        for job, jname, stage, i in _stage_jobs(jobs, spec):
            if not _running_indexed(job):
                continue
            seen.add(jname)
            first = now if stage.name in said else now + evicted.READ_SECONDS
            due, found = self.evictions.setdefault(jname, (first, None))
            if now >= due:
                found = evicted.summary(stage, i, _pods(kube, namespace, job, "Failed",
                                                        evicted.PODS_READ))
                self.evictions[jname] = (now + evicted.READ_SECONDS, found)
            if found:
                out[stage.name] = found
        for jname in set(self.evictions) - seen:
            del self.evictions[jname]
        return out

    def _stalled(self, kube: Kube, namespace: str, jobs: list[dict[str, Any]],
                 spec: PipelineRunSpec | None, said: frozenset[str]) -> Found:
        """Why a stage's pods do not start (stalled.py): a few Pending pods, read once its
        Job has had active pods and none ready for STALL_SECONDS, then again every
        STALL_SECONDS while they say why, and ever less often while they do not (a
        stage's earlier steps run as init containers: its pods are Pending, and fine, for
        as long as those run). A Job with no pod at all for as long has its refusal
        events read instead; an MPI stage whose workers or launcher are not all running,
        what stalled.to_read says."""
        now, out, seen = time.monotonic(), {}, set()
        for job, jname, stage, i in _stage_jobs(jobs, spec):
            what = stalled.to_read(job, stage.mpi.workers if stage.mpi else None)
            if not what:
                continue
            seen.add(jname)
            st = self.stalls.get(jname)
            if st is None and stage.name in said:
                st = self.stalls[jname] = stalled.Stall(since=now - stalled.STALL_SECONDS,
                                                        what=what)
            elif st is None or st.what != what:
                st = self.stalls[jname] = stalled.Stall(since=now, what=what)
            if now - st.since >= stalled.STALL_SECONDS and now >= st.next_read:
                st.read(_read_stall(kube, namespace, job, what, stage, i,
                                    spec.virtual_cluster if spec else None), now)
            if st.found:
                out[stage.name] = st.found
        for jname in set(self.stalls) - seen:
            del self.stalls[jname]
        return out


def _stage_jobs(jobs: list[dict[str, Any]], spec: PipelineRunSpec | None
                ) -> Iterator[tuple[dict[str, Any], str, Stage, int]]:
    """Each Job of a stage `spec` has: (the Job, its name, the stage, its index)."""
    index = {st.name: i for i, st in enumerate(spec.stages)} if spec else {}
    for job in jobs:
        meta = job["metadata"]
        i = index.get((meta.get("labels") or {}).get(names.LABEL_STAGE, ""))
        if spec is not None and i is not None:
            yield job, meta["name"], spec.stages[i], i


def _pods(kube: Kube, namespace: str, job: dict[str, Any], phase: str,
          limit: int) -> list[dict[str, Any]]:
    """At most `limit` of a stage Job's pods in `phase` (one LIST)."""
    return kube.list("v1", "Pod", namespace, label_selector=itemsmod.job_pods_selector(job),
                     field_selector=f"status.phase={phase}", limit=limit)[:limit]


def _running_indexed(job: dict[str, Any]) -> bool:
    """A started stage Job (an Indexed one: an MPIJob's pods are the MPI Operator's),
    neither suspended nor finished."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    return (spec.get("completionMode") == "Indexed" and bool(status.get("startTime"))
            and stalled.live(job))


def _read_stall(kube: Kube, namespace: str, job: dict[str, Any], what: str, stage: Stage,
                i: int, virtual_cluster: str | None = None) -> tuple[str, str] | None:
    """One stalled Job's reads (stalled.to_read's `what`), each only while the ones
    before it said nothing: Pending pods (and the events of one that waits for its
    volumes, or, on a VirtualCluster, that no node takes); refusal events (the Job's,
    the MPIJob's, or its launcher Job's since the MPIJob was made); with some pods
    running, a page of Pending pods (stalled.SOME_PODS_READ, and the events of one held
    without its sandbox, unmounted.held); an MPI stage's Running workers."""
    meta = job["metadata"]
    jname, now = meta["name"], datetime.now(UTC)

    def events(selector: str, reason: str = "") -> list[dict[str, Any]]:
        return kube.list("v1", "Event", namespace, limit=refusals.EVENTS_READ,
                         field_selector=f"{selector},reason={reason}" if reason else selector)

    found = None
    if what in ("pods", "mpi", "launcher"):
        pending = _pods(kube, namespace, job, "Pending", stalled.PODS_READ)
        found = stalled.summary(stage, i, pending)
        if found is None and (waiting := unmounted.first(pending)) is not None:
            # Scheduled, no sandbox: only its events say which volume and why.
            found = unmounted.summary(stage, i, waiting, events(
                f"involvedObject.uid={waiting['metadata'].get('uid')}"), now)
        elif found is not None and found[0] == stalled.WAITING_FOR_NODES and virtual_cluster \
                and (unplaced := unlaunched.first(pending)) is not None:
            # On Karpenter's pools, "no node fits" may mean none ever will: it says so.
            found = unlaunched.summary(stage, i, virtual_cluster, unplaced, events(
                f"involvedObject.uid={unplaced['metadata'].get('uid')}"), now) or found
    if found is None and what in ("events", "more"):
        found = stalled.not_created(stage, i, jname, events(
            f"involvedObject.uid={meta.get('uid')}", stalled.JOB_REFUSED), now,
            some=what == "more")
    if found is None and what == "more":
        page = _pods(kube, namespace, job, "Pending", stalled.SOME_PODS_READ)
        found = stalled.some_summary(stage, i, page)
        if found is None and (held := unmounted.held(page, now)) is not None:
            # A claim's disk attached to the node of the pods that run, say.
            found = unmounted.some_summary(stage, i, held, events(
                f"involvedObject.uid={held['metadata'].get('uid')}"), now)
    if found is None and what in ("mpi", "gang"):
        found = stalled.not_created(stage, i, jname, events(
            f"involvedObject.uid={meta.get('uid')}", stalled.MPI_REFUSED), now, whose="mpi")
    if found is None and what == "mpi":
        # No pod and no refusal, and no status: the MPI Operator never synced it (one
        # whose pod creates fail writes no status either, but says so in those events).
        found = stalled.mpi_unsynced(stage, job)
    if found is None and what == "launcher":
        launcher = jname + mpijob.LAUNCHER_SUFFIX
        made = refusals.parse_time(meta.get("creationTimestamp"))
        found = stalled.not_created(stage, i, launcher, events(
            f"involvedObject.kind=Job,involvedObject.name={launcher}", stalled.JOB_REFUSED),
            now, whose="launcher", after=made)  # not a same-named Job's from before
    if found is None and what == "gang" and stage.mpi:
        found = stalled.workers_unready(stage, i, _pods(
            kube, namespace, job, "Running", min(stage.mpi.workers, stalled.WORKERS_READ)))
    return found


def read_done(kube: Kube, run: dict[str, Any], cache: dict[str, str],
              only: str | None = None) -> None:
    """The done set of each stage whose status record is cut, into `cache` once per
    loop: one GET each. Absent, or an earlier same-named run's: nothing ("")."""
    ref = itemsmod.RunRef.of(run)
    for rec in (run.get("status") or {}).get("stages") or []:
        stage = str(rec.get("name") or "")
        if not rec.get("succeededItemsTruncated") or stage in cache or only not in (None, stage):
            continue
        cm = _own_configmap(kube, ref, doneset.configmap_name(ref.name, stage))
        cache[stage] = str(((cm or {}).get("data") or {}).get(doneset.KEY, ""))


def index_maps(kube: Kube, run: dict[str, Any], jobs: list[dict[str, Any]],
                cache: dict[str, list[int]]) -> dict[str, list[int]]:
    """By Job name, the map of each retry Job that keeps it in its indexes ConfigMaps:
    one GET per chunk, once per Job and loop. A chunk missing or not the run's leaves
    the map empty (the Job's progress counts nothing: its items run again on a rerun,
    none is skipped)."""
    ref = itemsmod.RunRef.of(run)
    out: dict[str, list[int]] = {}
    for job in jobs:
        meta = job["metadata"]
        n = (meta.get("annotations") or {}).get(names.ANNOTATION_INDEXES_CONFIGMAPS)
        if n is None:
            continue
        uid = str(meta.get("uid") or meta["name"])
        if uid not in cache:
            labels = meta.get("labels") or {}
            try:
                attempt, chunks = int(labels.get(names.LABEL_ATTEMPT, "")), int(n)
            except ValueError:  # edited by hand: not ours to trust, so it maps nothing
                attempt, chunks = 0, 0
            cache[uid] = _read_map(kube, ref, labels.get(names.LABEL_STAGE, ""), attempt,
                                   chunks)
        out[str(meta["name"])] = cache[uid]
    return out


def _read_map(kube: Kube, ref: itemsmod.RunRef, stage: str, attempt: int,
              chunks: int) -> list[int]:
    lines: list[int] = []
    for c in range(chunks):
        cm = _own_configmap(kube, ref, itemsmod.indexes_configmap_name(ref.name, stage,
                                                                       attempt, c))
        if cm is None:
            return []
        try:
            lines += [int(x) for v in (cm.get("data") or {}).values() for x in v.split()]
        except ValueError:
            return []
    return lines


def _own_configmap(kube: Kube, ref: itemsmod.RunRef, name: str) -> dict[str, Any] | None:
    """The run's own ConfigMap of that name; None when absent or an earlier same-named
    run's."""
    cm = kube.get("v1", "ConfigMap", name, ref.namespace)
    return cm if cm is not None and itemsmod.owned_by(cm.get("metadata") or {}, ref.uid) else None
