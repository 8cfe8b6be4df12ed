"""The PipelineRun decision: observed Jobs + run in, manifests + complete status out.

Pure and level-based: everything is derived from the run (spec and the status this
function wrote earlier) and the Jobs, all named deterministically, so the same
inputs give the same plan and an operator restarted at any moment never creates a
second Job for a stage attempt.

The status is the record, the Jobs only the work in flight: a finished run (Succeeded,
Failed, Cancelled) creates nothing again whatever happens to its Jobs (only a
rerunFailed request starts new work), and a stage Job lost mid-run is replaced by a
new attempt that runs only the items the record does not hold as succeeded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from nightshift.api import names
from nightshift.api.conditions import rfc3339
from nightshift.api.events import Event
from nightshift.api.fieldpath import field_path
from nightshift.api.problems import Problem
from nightshift.api.requeue import sooner
from nightshift.pipelinerun import batch as batchmod
from nightshift.pipelinerun import (
    binding,
    launch,
    mpijob,
    references,
    runnerparts,
    validate,
    validity,
)
from nightshift.pipelinerun import doneset as donemod
from nightshift.pipelinerun import items as itemsmod
from nightshift.pipelinerun import jobs as jobsmod
from nightshift.pipelinerun import lost as lostmod
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun import stalled as stalledmod
from nightshift.pipelinerun.items import RunRef
from nightshift.pipelinerun.plantypes import Observed, Plan
from nightshift.pipelinerun.spec import TERMINAL_PHASES, PipelineRunSpec
from nightshift.pipelinerun.status import StageRecord, build_status, stage_record, unresolved_status

# Seconds between looks at a running MPI stage's MPIJob.
MPI_POLL = 5.0
# Seconds between looks for a SharedStorage a stage waits for (its creation wakes too).
STORAGE_WAIT = 30.0
# A stage waits for an earlier same-named run's Job or ConfigMap (plantypes.earlier).
EARLIER_RUN_OBJECTS = "EarlierRunObjects"
# The most characters of a retry Job's skip-items annotation, so the Job stays far below
# the API's 256 KiB of annotations; beyond, the Job's map is its indexes ConfigMaps.
SKIP_ITEMS_CHARS = 65_536


def plan(observed: Observed) -> Plan:
    return _Planner(observed).run()


class _Planner:
    def __init__(self, obs: Observed) -> None:
        self.obs = obs
        self.ref = RunRef.of(obs.run)
        meta = obs.run.get("metadata") or {}
        self.generation = int(meta.get("generation") or 0)
        self.old: Mapping[str, Any] = obs.run.get("status") or {}
        self.now = rfc3339(obs.now)
        self.apply: list[dict[str, Any]] = []
        self.done: dict[str, str] = {}
        self.patch: list[dict[str, Any]] = []
        self.resolve: list[str] = []
        # The run's SharedStorages resolved (binding.py); a stage needing a missing one waits.
        self.binding = binding.Binding(PipelineRunSpec(stages=[]))
        self.refs = references.References(PipelineRunSpec(stages=[]))
        self.off_pool: dict[str, str] = {}  # binding.off_pool
        self.lost_waits: list[str] = []  # lost Jobs whose pods a replacement waits for
        self.requeue: float | None = None
        self.problems: list[Problem] = []
        self.carried: list[str] = []  # validity.Validity.carried
        self.validity = validity.Validity([])
        self.records: dict[str, StageRecord] = {}
        self.extra_events: list[Event] = []
        # Finished before this pass, and nothing of it runs: the record stands.
        self.final = False
        old_stages = self.old.get("stages") or []
        self.old_stages = {s.get("name"): s for s in old_stages}

    def run(self) -> Plan:
        try:
            spec = PipelineRunSpec.model_validate(self.obs.run.get("spec") or {})
        except ValidationError as e:
            self.problems = [Problem(
                field_path("spec", *err["loc"]), err["msg"]) for err in e.errors()]
            return self._finish(None, {}, rerun_handled=int(self.old.get("rerunFailed") or 0))
        bound = binding.bind(spec, self.obs.shared_storages, self.ref.namespace)
        spec, self.binding = bound.spec, bound
        self.refs = references.check(spec, self.ref.namespace, self.obs.virtual_clusters,
                                     self.obs.service_accounts, self.obs.secrets,
                                     self.obs.config_maps, self.obs.volume_claims)
        spec = self.refs.spec
        self.off_pool = binding.off_pool(spec)
        self.problems = validate.validate_spec(spec, self.ref.name) + bound.problems
        self.problems += [Problem(where, f"refused by the API server: {why}")
                          for where, why in self.obs.refused]
        self.problems += runnerparts.image_problems(
            spec.runner_image, [self.obs.runner_image, *self.obs.runner_images])
        bad_items = [Problem(f"stage {stage}", why)
                     for stage, (why, invalid) in self.obs.unresolved.items() if invalid]
        self.problems += bad_items
        by_stage = itemsmod.jobs_by_stage(self.obs.jobs, self.ref.name,
                                            {st.name for st in spec.stages})
        views: dict[str, pg.StageView] = {}
        for i, st in enumerate(spec.stages):
            info = self.obs.items.get(st.name)
            if info is not None:
                self.problems += validate.check_count(f"spec.stages[{i}].forEach", info.count, st)
            total = info.count if info else 0
            # The done set: what a cut record leaves out, where the Jobs that said it are gone.
            views[st.name] = pg.stage_view(
                by_stage.get(st.name, {}), total, st.tolerate_failed_items,
                self.old_stages.get(st.name), batch=st.batch,
                done_ranges=self.obs.done_items.get(st.name, ""),
                maps=self.obs.index_maps)
        rerun_handled = max([int(self.old.get("rerunFailed") or 0)] + [
            int((j.get("metadata", {}).get("annotations") or {}).get(names.ANNOTATION_RERUN, 0))
            for js in by_stage.values() for j in js.values()])
        # A retry Job running (its status write lost, say) means the run is not done.
        self.final = self.old.get("phase") in TERMINAL_PHASES and not any(
            a.state in (pg.RUNNING, pg.SUSPENDED) and a.record is None
            for v in views.values() for a in v.attempts[-1:])
        self.validity = validity.judge(self.old, self.problems, bad_items,
                                       started=bool(by_stage or self.old.get("startTime")))
        self.problems, self.carried = self.validity.problems, self.validity.carried
        if not self.problems and not self.carried:
            rerun_handled = self._decide(spec, views, rerun_handled)
        else:
            # Invalid once started (found now or carried; items found invalid as their
            # stage was about to start too): nothing new starts, but the Jobs that run
            # still obey the operating knobs (cancel, suspend, parallelism) until they end.
            for st in spec.stages:
                self._patch_existing(spec, st, views[st.name])
        return self._finish(spec, views, rerun_handled)

    # --- decisions ---------------------------------------------------------------

    def _decide(self, spec: PipelineRunSpec, views: dict[str, pg.StageView],
                rerun_handled: int) -> int:
        states = {n: _stage_state(v) for n, v in views.items()}
        active = any(s in (pg.RUNNING, pg.SUSPENDED, pg.LOST) for s in states.values())
        finished_with_failures = not active and any(
            v.latest is not None and v.not_succeeded and states[n] in (pg.FAILED, pg.SUCCEEDED)
            for n, v in views.items())
        finished = not active and (pg.FAILED in states.values() or all(
            s == pg.SUCCEEDED for s in states.values()))
        # A request is consumed only by a finished run, so one made early is kept.
        if spec.rerun_failed > rerun_handled and finished and not spec.cancel:
            if finished_with_failures:
                for st in spec.stages:
                    v = views[st.name]
                    if v.latest is not None and v.not_succeeded:
                        self._create(spec, st, v, v.latest.attempt + 1, spec.rerun_failed)
                        states[st.name] = pg.RUNNING
                        self.final = False
            rerun_handled = spec.rerun_failed
        if not (self.final or spec.cancel):
            for st in spec.stages:
                v = views[st.name]
                if v.unseen:
                    # Created by an earlier pass, never seen: the same Job again.
                    self._create(spec, st, v, v.unseen, rerun_handled)
                    states[st.name] = pg.RUNNING
                elif v.latest is not None and v.latest.state == pg.LOST:
                    self._replace_lost(spec, st, v, rerun_handled)
        blocked = (self.final or spec.cancel or spec.suspend
                   or any(s == pg.FAILED for s in states.values()))
        for st in spec.stages:
            v = views[st.name]
            if v.latest is not None or v.unseen or blocked:
                continue
            if not all(states.get(d) == pg.SUCCEEDED for d in st.depends_on):
                continue
            if (binding.waits(st, spec, self.binding.missing_entries)
                    or st.name in self.refs.waiting_stages or st.name in self.off_pool
                    or st.name in self.obs.earlier):
                self.requeue = sooner(self.requeue, STORAGE_WAIT)
                continue
            if st.name not in self.obs.items:
                self.resolve.append(st.name)
                continue
            v.total = self.obs.items[st.name].count
            self._create(spec, st, v, 0, 0)
        for st in spec.stages:
            self._patch_existing(spec, st, views[st.name])
        return rerun_handled

    def _replace_lost(self, spec: PipelineRunSpec, st: Any, v: pg.StageView,
                      rerun: int) -> None:
        lost = v.latest
        assert lost is not None  # noqa: S101  (invariant for mypy: a lost Job is one we saw)
        if self._held_by_lost_pods(st.name, lost, replaced=True):
            return
        self._create(spec, st, v, lost.attempt + 1, rerun)
        latest = v.latest
        assert latest is not None  # noqa: S101  (invariant for mypy: _create just set it)
        self.extra_events.append(Event(
            "Warning", "JobLost", f"stage {st.name}: Job {lost.name} (attempt "
            f"{lost.attempt}) is gone before the stage finished; attempt {latest.attempt} "
            f"runs the {latest.completions} items not recorded as succeeded"))

    def _held_by_lost_pods(self, stage: str, lost: pg.AttemptView, *, replaced: bool) -> bool:
        """Whether a lost Job's pods are still going (a Job deleted with orphaned or
        terminating pods); if so, say so and look again soon."""
        if not self.obs.live_pods.get(lost.name):
            return False
        self.requeue = sooner(self.requeue, lostmod.LOST_POD_WAIT)
        selector = itemsmod.label_selector(itemsmod.attempt_labels(
            self.ref.name, stage, lost.attempt))
        self.lost_waits.append(lostmod.waiting(stage, lost.name, self.ref.namespace, selector,
                                               replaced=replaced))
        return True

    def _create(self, spec: PipelineRunSpec, st: Any, v: pg.StageView, attempt: int,
                rerun: int) -> None:
        info = self.obs.items.get(st.name)
        item_cms = list(info.configmaps) if info else [
            itemsmod.items_configmap_name(self.ref.name, st.name, 0)]
        index_cms: list[str] = []
        completions = v.total
        skip: str | None = None
        indexes: list[int] | None = None
        in_configmaps = False
        if attempt:
            # The Job carries what it skips, so it maps its own indexes later on; or,
            # where that does not fit, says its indexes ConfigMaps are its map.
            text, in_configmaps = pg.record_ranges(v.succeeded, SKIP_ITEMS_CHARS)
            skip = None if in_configmaps else text
            indexes = v.not_succeeded
            cms = itemsmod.indexes_configmaps(self.ref, st.name, attempt, indexes)
            self.apply += cms
            index_cms = [c["metadata"]["name"] for c in cms]
            completions = len(indexes)
        start = self._start_time(st.name, attempt, None)
        # `completions` counts items; a batched Job has one completion per batch of them.
        batches = batchmod.completions(completions, st.batch)
        parallelism = self._parallelism(spec, st, batches, start)
        pool = references.pool_nodes(spec, self.obs.virtual_clusters, st.pool)
        if st.mpi is not None:
            self.requeue = sooner(self.requeue, MPI_POLL)
            self.apply.append(mpijob.render_mpijob(
                run=self.ref, spec=spec, stage=st, attempt=attempt,
                suspend=spec.suspend or spec.cancel, rerun=rerun, pool=pool))
        else:
            self.apply.append(jobsmod.render_job(
                run=self.ref, spec=spec, stage=st, attempt=attempt, completions=batches,
                item_configmaps=item_cms, indexes_configmaps=index_cms,
                parallelism=parallelism, suspend=spec.suspend or spec.cancel,
                runner_image=self._runner_image(spec), rerun=rerun, skip_items=skip,
                map_in_configmaps=in_configmaps,
                positions=completions if st.batch > 1 else None,
                gather_configmaps={g: self.obs.items[g].configmaps
                                   for g in runnerparts.gathered(st) if g in self.obs.items},
                pool=pool))
        # Stands in for the Job until the informer sees it, so status says Running now.
        v.attempts.append(pg.AttemptView(
            attempt=attempt, name=itemsmod.job_name(self.ref.name, st.name, attempt),
            completions=completions, succeeded=set(), failed=set(),
            unfinished=list(indexes if indexes is not None else range(completions)),
            active=0, ready=0, state=pg.RUNNING, creation_time=start,
            parallelism=parallelism, indexes=indexes, batch=st.batch))

    def _patch_existing(self, spec: PipelineRunSpec, st: Any, v: pg.StageView) -> None:
        latest = v.latest
        if latest is None or latest.state in (pg.SUCCEEDED, pg.FAILED, pg.LOST):
            return
        if any(j["metadata"]["name"] == latest.name for j in self.apply):
            return
        want_suspend = spec.suspend or spec.cancel
        if st.mpi is not None:
            # No watch on MPIJobs (the CRD is optional): look again while one runs.
            self.requeue = sooner(self.requeue, MPI_POLL)
            if latest.suspended != want_suspend:
                self.patch.append(mpijob.suspend_patch(latest.name, self.ref.namespace,
                                                       want_suspend))
                latest.suspended = want_suspend
            return
        start = self._start_time(st.name, latest.attempt, latest.creation_time)
        want_par = self._parallelism(spec, st,
                                     batchmod.completions(latest.completions, st.batch), start)
        body: dict[str, Any] = {}
        if latest.suspended != want_suspend:
            body["suspend"] = want_suspend
        if latest.parallelism != want_par:
            body["parallelism"] = want_par
        if body:
            self.patch.append({"apiVersion": "batch/v1", "kind": "Job",
                               "metadata": {"name": latest.name,
                                            "namespace": self.ref.namespace},
                               "spec": body})
            latest.parallelism = want_par
            latest.suspended = want_suspend

    def _runner_image(self, spec: PipelineRunSpec) -> str:
        return spec.runner_image or self.obs.runner_image

    def _start_time(self, stage: str, attempt: int, fallback: str | None) -> str:
        return launch.attempt_start(self.old_stages.get(stage), attempt, fallback or self.now)

    def _parallelism(self, spec: PipelineRunSpec, st: Any, completions: int,
                     start: str) -> int:
        allowed, wait = launch.stage_parallelism(spec, st, completions, start, self.obs.now)
        if wait is not None:
            self.requeue = sooner(self.requeue, wait)
        return allowed

    # --- status ------------------------------------------------------------------

    def _finish(self, spec: PipelineRunSpec | None, views: dict[str, pg.StageView],
                rerun_handled: int) -> Plan:
        records: list[StageRecord] = []
        if spec is not None:
            for st in spec.stages:
                v = views[st.name]
                old = self.old_stages.get(st.name) or {}
                latest = v.latest
                if self.final and old and (latest is None or latest.record is not None):
                    # A finished run's stage whose Job is gone: its record stands.
                    records.append(dict(old))
                    continue
                rec = stage_record(st.name, v, old, self.obs.failure_samples.get(st.name) or [],
                                   self.now, cancelled=spec.cancel)
                if rec.get("succeededItemsTruncated"):
                    self.done[st.name] = donemod.record(v.succeeded)
                if ((self.problems or self.carried) and latest is not None
                        and latest.state == pg.LOST):
                    # Its pods still running, the stage and the run end when they do, not
                    # while they may still write. (A cancel ends the run at once, as in a
                    # valid run.)
                    if not spec.cancel and self._held_by_lost_pods(st.name, latest,
                                                                   replaced=False):
                        records.append(rec)
                        continue
                    # No Job replaces it in an invalid run: the stage ends here.
                    rec.update(phase=pg.FAILED, reason="JobLost", completionTime=self.now,
                               message=f"Job {latest.name} is gone and an Invalid run "
                                       "starts no replacement")
                records.append(rec)
        elif self.final:
            records = [dict(r) for r in self.old.get("stages") or []]
        stuck = [] if self.final else stalledmod.mark(records, self.obs.stalled)
        off_pool = [m for r in records if r["phase"] == pg.PENDING
                    and (m := self.off_pool.get(r["name"]))]
        if not self.final and any(stalledmod.unready(j) or stalledmod.uncreated(j)
                                  for j in self.obs.jobs):
            # Look again soon: a Job whose pods do not start, or are never made, sends
            # no events.
            wait = stalledmod.STALL_SECONDS
            self.requeue = sooner(self.requeue, wait)
        status, events = build_status(
            old=self.old, records=records,
            problems=[*self.carried, *(str(p) for p in self.problems)],
            invalid_reason=self.validity.reason,
            generation=self.generation, now=self.now, rerun_handled=rerun_handled,
            suspend=bool(spec and spec.suspend), cancel=bool(spec and spec.cancel),
            resolving=bool(self.resolve), final=self.final,
            waiting="; ".join([*self.refs.waiting, *self.binding.missing, *off_pool,
                               *self.lost_waits, *launch.paused(spec, records)]),
            waiting_reason=self.refs.reason or (
                "WaitingForStorage" if self.binding.missing or off_pool
                else "WaitingForLostJobPods" if self.lost_waits else "Paused"),
            stalled=stuck, ending="; ".join(self.lost_waits),
            waived="; ".join(map(str, self.validity.waived)))
        out_events = [*self.extra_events, *(Event(*e) for e in events)]
        resolve, requeue = self.resolve, self.requeue
        waiting_items = {stage: why for stage, (why, invalid) in self.obs.unresolved.items()
                         if not invalid}
        for waits, reason in ((waiting_items, "ItemsUnresolved"),
                              (self.obs.earlier, EARLIER_RUN_OBJECTS)):
            if waits and not (self.problems or self.carried):
                # Only the waiting stages wait: the others start, change and go on.
                status, unresolved = unresolved_status(self.old, status, waits,
                                                       self.generation, self.now, reason)
                out_events += [Event(*e) for e in unresolved]
                requeue = sooner(self.requeue, 10.0)
                if reason != EARLIER_RUN_OBJECTS:
                    # Resolved this pass already (reconcile.py); the earlier-run stages
                    # are never in `resolve`, and the others freeze meanwhile.
                    resolve = []
        return Plan(
            resolve_items=resolve,
            apply=self.apply,
            delete=[],
            status=status,
            events=out_events,
            requeue_after=requeue,
            patch=self.patch,
            done=self.done,
        )


def _stage_state(v: pg.StageView) -> str:
    if v.latest is None:
        return pg.RUNNING if v.unseen is not None else pg.PENDING
    return v.latest.state
