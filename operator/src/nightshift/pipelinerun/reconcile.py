"""PipelineRun reconcile pass: read observed → plan (pure) → apply → status, once.

The API cost of a pass is O(stages): one GET of the run, one LIST of its Jobs, one
LIST of its items ConfigMaps, a GET of each SharedStorage, VirtualCluster,
ServiceAccount, claim, Secret and ConfigMap it names (references.py; the last three
only while something of it may start), and the few pod reads of observe.py (failure
samples when a stage's failure count moved, a stalled Job's Pending pods, a running
Job's Failed pods once a minute). Never a list of all pods, nor of all Secrets.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from nightshift import metrics
from nightshift.api import names, refusals
from nightshift.api.events import Event
from nightshift.api.requeue import sooner
from nightshift.config import OperatorConfig
from nightshift.engine.loop import Outcome
from nightshift.engine.passes import post_events
from nightshift.engine.status import StatusWriter
from nightshift.kube import Kube, KubeError, naming
from nightshift.pipelinerun import binding, cost, doneset, mpijob, references
from nightshift.pipelinerun import items as itemsmod
from nightshift.pipelinerun.itemsource import ResolveError, frozen_items, resolve_and_freeze
from nightshift.pipelinerun.lost import lost_jobs
from nightshift.pipelinerun.observe import PodReads, index_maps, read_done
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import Observed, Plan
from nightshift.pipelinerun.spec import TERMINAL_PHASES, PipelineRunSpec

# Status fields that move with every pod: written at most every progress_interval.
# succeededItems (the ranges a lost Job's replacement skips) moves with every pod too:
# throttled with the counters, so a replacement may rerun what finished in the last
# interval (docs/pipelinerun.md), never skip what did not.
PROGRESS_KEYS = frozenset(("succeeded", "failed", "running", "ready", "progress",
                           "succeededItems", "succeededItemsTruncated", "cost"))


@dataclass
class LoopState:
    """What one run's loop remembers between passes (lost on restart, harmlessly)."""

    writer: StatusWriter = field(default_factory=lambda: StatusWriter(
        names.API_VERSION, names.PIPELINERUN, PROGRESS_KEYS))
    # Failure samples, stalls and evictions: what the few pod reads found (observe.py).
    pods: PodReads = field(default_factory=PodReads)
    # The cost integration (pipelinerun/cost.py): Ready counts the Job watch saw since
    # the last pass, where the integration stands, and the newest status.cost (the
    # status write is throttled; the figures must not be).
    ready_samples: list[cost.Sample] = field(default_factory=list)
    tally: cost.Tally | None = None
    cost: dict[str, Any] | None = None
    # UIDs of the run's Jobs the watch has seen finish: each finish wakes the loop for a
    # pass now (the barrier to the next stage, the run's end), once.
    finished_jobs: set[str] = field(default_factory=set)
    # The SharedStorages and the VirtualCluster the run names, as (kind, name): their
    # watch events wake the loop, so a stage waiting for one starts when it appears or
    # is fixed, not at the next 30-s look (plan.STORAGE_WAIT).
    references: frozenset[tuple[str, str]] = frozenset()
    # Stage -> its done-set ConfigMap's ranges as last read or written (doneset.py): read
    # once per loop, for stages whose succeededItems is cut.
    done: dict[str, str] = field(default_factory=dict)
    done_refused: set[str] = field(default_factory=set)
    # Job uid -> its completion-index map, for retry Jobs that keep it in ConfigMaps
    # (immutable: read once per Job and loop).
    index_maps: dict[str, list[int]] = field(default_factory=dict)
    # The run these belong to: a run deleted and re-created under its name while the
    # watch re-listed (no DELETED event) keeps the loop, never the old run's state.
    uid: str = ""

    def of_run(self, uid: str) -> None:
        """Forget what belonged to another run of the same name (not at the loop's
        first pass: the watch's samples before it are this run's)."""
        if self.uid and uid != self.uid:
            fresh = LoopState(uid=uid)
            for f in ("pods", "ready_samples", "tally", "cost", "finished_jobs", "done",
                      "done_refused", "index_maps"):
                setattr(self, f, getattr(fresh, f))
        self.uid = uid


def reconcile(kube: Kube, config: OperatorConfig, namespace: str, name: str,
              state: LoopState) -> Outcome:
    run = kube.get(names.API_VERSION, names.PIPELINERUN, name, namespace)
    if run is None or run["metadata"].get("deletionTimestamp"):
        return Outcome(gone=True)  # the loop's end drops its metrics (handlers._forget)
    state.of_run(str(run["metadata"].get("uid", "")))
    selector = f"{names.LABEL_RUN}={name}"
    listed_at = datetime.now(UTC)  # Ready changes the watch times after it are newer
    jobs = kube.list("batch/v1", "Job", namespace, label_selector=selector)
    try:
        spec: PipelineRunSpec | None = PipelineRunSpec.model_validate(run.get("spec") or {})
    except ValidationError:
        spec = None  # plan() reports it as Invalid, naming the field.
    storages = binding.referenced(spec) if spec else []
    # Before the GETs below: an object created after them wakes this loop again.
    state.references = frozenset(
        [(names.SHAREDSTORAGE, n) for n in storages]
        + ([(names.VIRTUALCLUSTER, spec.virtual_cluster)]
           if spec and spec.virtual_cluster else []))
    if spec and any(st.mpi for st in spec.stages):
        # MPI stages run as MPIJobs (pipelinerun/mpijob.py), read here as Jobs. Without
        # the MPI Operator's CRD the list is empty and creating one is refused, which
        # the run's Invalid condition names.
        try:
            jobs += [mpijob.as_job(m) for m in kube.list(
                mpijob.API_VERSION, mpijob.KIND, namespace, label_selector=selector)]
        except KubeError as e:
            if e.status != 404:
                raise
    # A run re-created under a deleted one's name finds that run's Jobs and ConfigMaps
    # under its own deterministic names until they are collected: never its own.
    uid, earlier = str(run["metadata"].get("uid", "")), dict[str, list[str]]()
    jobs = _own(jobs, name, uid, {st.name for st in spec.stages} if spec else set(), earlier)
    items = frozen_items(kube, namespace, name, spec, uid, earlier) if spec else {}
    waits = {st: itemsmod.earlier_run_wait(objs, namespace) for st, objs in earlier.items()}
    read_done(kube, run, state.done)
    maps = index_maps(kube, run, jobs, state.index_maps)
    samples = state.pods.failure_samples(kube, namespace, jobs)
    stuck = state.pods.held(kube, namespace, jobs, spec, frozenset(
        str(st.get("name")) for st in (run.get("status") or {}).get("stages") or []
        if st.get("waiting")))
    # Rare (a stage Job deleted mid-run): one short pod LIST per lost Job.
    live = {job: len(kube.list("v1", "Pod", namespace,
                               label_selector=itemsmod.label_selector(labels),
                               field_selector="status.phase!=Succeeded,status.phase!=Failed",
                               limit=1))
            for job, labels in lost_jobs(run, jobs).items()}

    # The SharedStorages spec.storage names: one GET each (at most 20 entries).
    shared = {n: kube.get(names.API_VERSION, names.SHAREDSTORAGE, n, namespace)
              for n in storages}

    # The VirtualCluster it names: one GET (references.py: a missing one or pool waits).
    vcs = ({spec.virtual_cluster: kube.get(names.API_VERSION, names.VIRTUALCLUSTER,
                                           spec.virtual_cluster, namespace)}
           if spec and spec.virtual_cluster else {})

    # The ServiceAccounts the stages name: one GET each (references.py).
    accounts = {sa: kube.get("v1", "ServiceAccount", sa, namespace) is not None
                for sa in (references.service_accounts(spec) if spec else [])}

    # The claims of its pvc storages: one GET each (references.py).
    claims = {c: kube.get("v1", "PersistentVolumeClaim", c, namespace) is not None
              for c in (references.claims(spec) if spec and _may_start(run, spec) else [])}

    # The Secrets and ConfigMaps the pods reference: one GET each, key names kept only.
    secrets, config_maps = _referenced_keys(kube, namespace, run, spec, shared)

    def observe() -> Observed:
        return Observed(run=run, jobs=jobs, items=items, failure_samples=samples,
                        stalled=stuck,
                        now=datetime.now(UTC), runner_image=config.runner_image,
                        runner_images=config.runner_images,
                        live_pods=live, shared_storages=shared, virtual_clusters=vcs,
                        service_accounts=accounts, secrets=secrets, config_maps=config_maps,
                        volume_claims=claims, earlier=waits, done_items=dict(state.done),
                        index_maps=maps)

    p = plan(observe())
    refused: list[tuple[str, str]] = []
    unresolved: dict[str, tuple[str, bool]] = {}
    if p.resolve_items:
        # Nothing is frozen for a stage whose items do not resolve: it waits, the user
        # sees why, and a fix (say, creating the ConfigMap) is picked up on a later
        # pass. The other stages go on meanwhile (plan.py); items that are invalid make
        # the run Invalid: nothing new starts, and it is Failed once its Jobs end.
        for stage in p.resolve_items:
            try:
                resolve_and_freeze(kube, run, stage, config)
            except ResolveError as e:
                unresolved[stage] = (str(e), e.invalid)
            except KubeError as e:
                if not refusal(e):
                    raise
                refused = [(e.obj or f"the items of stage {stage}", _why(e))]
                break
        items = frozen_items(kube, namespace, name, spec, uid) if spec else {}
        p = plan(replace(observe(), refused=refused, unresolved=unresolved))

    if not refused:
        refused = _apply(kube, namespace, p)
        if refused:
            p = plan(replace(observe(), refused=refused, unresolved=unresolved))
    return _finish(kube, config, state, run, p, (jobs, listed_at), vcs)


Keys = dict[str, frozenset[str] | None]


def _may_start(run: dict[str, Any], spec: PipelineRunSpec) -> bool:
    """Whether anything of the run may still start: not when it finished and no rerun
    is asked (its references would be read for nothing)."""
    status = run.get("status") or {}
    return not (status.get("phase") in TERMINAL_PHASES
                and spec.rerun_failed <= int(status.get("rerunFailed") or 0))


def _referenced_keys(kube: Kube, namespace: str, run: dict[str, Any],
                     spec: PipelineRunSpec | None,
                     shared: dict[str, dict[str, Any] | None]) -> tuple[Keys, Keys]:
    """Which keys each referenced Secret and ConfigMap holds (None: it does not exist).

    A Secret's values are dropped here, on read: only key names go on
    (docs/security.md).
    """
    if spec is None or not _may_start(run, spec):
        return {}, {}
    # After binding: an s3 SharedStorage's credentialsSecret is referenced too.
    bound = binding.bind(spec, shared, namespace).spec

    def read(kind: str) -> Keys:
        out: Keys = {}
        for name in references.names_of(bound, kind):
            try:
                obj = kube.get("v1", kind, name, namespace)
            except KubeError as e:
                if e.status != 403:
                    raise
                # Secrets are granted only by name or by rbac.readSecrets: one the
                # operator may not read is not checked (docs/security.md).
                continue
            out[name] = None if obj is None else frozenset(
                [*(obj.get("data") or {}), *(obj.get("binaryData") or {})])
        return out

    return read(references.SECRET), read(references.CONFIGMAP)


def _finish(kube: Kube, config: OperatorConfig, state: LoopState, run: dict[str, Any],
            p: Plan, listed: tuple[list[dict[str, Any]], datetime],
            vcs: dict[str, dict[str, Any] | None]) -> Outcome:
    """Status once, metrics, the plan's events; when to look again. `listed`: the
    run's Jobs and when they were read."""
    meta = run["metadata"]
    _cost(state, run, p, *listed, next(iter(vcs.values()), None))
    state.writer.progress_interval = config.progress_interval
    written = state.writer.write(kube, run, p.status)
    metrics.observe_run(meta["namespace"], meta["name"], p.status)
    post_events(kube, run, p.events)
    if written or state.writer.deferred is None:
        # The done sets go with the status they complete, never more often; and again
        # in a pass that changed nothing, if one was not kept (a failed write, a restart
        # between the two), so a finished run's is not lost for good.
        post_events(kube, run, _keep_done(kube, run, p.done, state.done, state.done_refused))
    terminal = p.status.get("phase") in TERMINAL_PHASES
    return Outcome(requeue_after=None if terminal
                   else sooner(sooner(p.requeue_after, state.writer.deferred),
                               state.pods.next_read()))


def _apply(kube: Kube, namespace: str, p: Plan) -> list[tuple[str, str]]:
    """The plan's writes, in order (ConfigMaps before the Job that mounts them).

    A refusal of the object itself (a 4xx other than a conflict or throttling) stops the
    writes and is returned, naming the object: retrying the same write can only fail
    the same way. Anything else raises, and the engine retries with backoff.
    """
    for manifest in p.apply:
        kind, obj = manifest["kind"], manifest["metadata"]["name"]
        try:
            with naming(kind, obj, "applying"):
                kube.apply(manifest)
        except KubeError as e:
            if not refusal(e):
                raise
            if kind == mpijob.KIND and e.status == 404:
                stage = manifest["metadata"].get("labels", {}).get(names.LABEL_STAGE, "?")
                return [(f"stage {stage}'s mpi ({kind} {obj})",
                         f"{_why(e)}: this cluster has no {kind} kind "
                         f"({mpijob.API_VERSION}); install the Kubeflow MPI Operator "
                         "(docs/mpi.md) and create the run again")]
            return [(e.obj or f"{kind} {obj}", _why(e))]
    for change in p.patch:
        # Merge patches, not apply: see Plan.patch (mutable fields of existing Jobs).
        meta = change["metadata"]
        try:
            with naming(change["kind"], meta["name"], "patching"):
                kube.merge_patch(change["apiVersion"], change["kind"], meta["name"],
                                 meta.get("namespace", namespace), {"spec": change["spec"]})
        except KubeError as e:
            if not refusal(e):
                raise
            return [(f"{change['kind']} {meta['name']}", _why(e))]
    for ref in p.delete:
        kube.delete(ref["apiVersion"], ref["kind"], ref["name"], namespace,
                    propagation=ref.get("propagation", "Background"))
    return []


def _keep_done(kube: Kube, run: dict[str, Any], done: dict[str, str],
               cache: dict[str, str], refused: set[str]) -> list[Event]:
    """Apply each stage's done set that differs from the one kept. A refusal (a quota on
    ConfigMaps, a policy) does not stop the run: a Warning says what it costs."""
    ref = itemsmod.RunRef.of(run)
    events = []
    for stage, text in sorted(done.items()):
        if cache.get(stage) == text:
            continue
        name = doneset.configmap_name(ref.name, stage)
        try:
            with naming("ConfigMap", name, "applying"):
                kube.apply(doneset.render(ref, stage, text))
        except KubeError as e:
            # A full ConfigMap quota included: the record is worth no failed pass.
            if e.transient or not 400 <= e.status < 500:
                raise
            if stage not in refused:  # said once per loop, not at every try
                events.append(doneset.refused(stage, name, _why(e)))
            refused.add(stage)
            continue
        cache[stage] = text
        refused.discard(stage)  # a later refusal is said again
    return events


def refusal(e: KubeError) -> bool:
    """Whether the API server refused the object itself, for good."""
    if e.transient or not 400 <= e.status < 500:
        return False
    # A full quota or a namespace being deleted is the cluster's state, not the run's
    # fault: the engine retries, and if it lasts its ReconcileError condition says why.
    return refusals.namespace_state(e.status, e.message) is None


def _why(e: KubeError) -> str:
    # naming() put "applying Job x: " in front; the object is named apart already.
    message = e.message.partition(": ")[2] if e.obj else e.message
    return f"{e.status} {e.reason}: {message}"


def _own(jobs: list[dict[str, Any]], run: str, uid: str, stages: set[str],
         earlier: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The run's own Jobs; an earlier same-named run's holding the name of one of the
    run's stages' Jobs goes in `earlier`, as "job/<name>" (or mpijob/) by stage."""
    out = []
    for job in jobs:
        meta = job["metadata"]
        if itemsmod.owned_by(meta, uid):
            out.append(job)
            continue
        if (found := itemsmod.stage_attempt(job, run, stages)) is not None:
            # as_job marks an MPIJob read as a Job
            kind = "mpijob" if mpijob.OPERATOR_SEEN in (job.get("status") or {}) else "job"
            earlier.setdefault(found[0], []).append(f"{kind}/{meta['name']}")
    return out


def _cost(state: LoopState, run: dict[str, Any], p: Plan, jobs: list[dict[str, Any]],
          listed_at: datetime, vc: dict[str, Any] | None) -> None:
    """status.cost, advanced to now (pure arithmetic in pipelinerun/cost.py)."""
    samples, state.ready_samples = state.ready_samples, []
    vc_status = (vc or {}).get("status")
    if not (vc_status or {}).get("cost"):
        return  # no VirtualCluster, or one that records no cost: nothing to price with
    try:
        spec = PipelineRunSpec.model_validate(run.get("spec") or {})
    except ValidationError:
        return
    pools = [str(pl.get("name")) for pl in (vc_status or {}).get("pools") or []]
    pool_of = {st.name: st.pool or (pools[0] if pools else "") for st in spec.stages}
    frozen = (run.get("status") or {}).get("phase") in TERMINAL_PHASES
    prev = state.cost or (run.get("status") or {}).get("cost")
    state.cost, state.tally = cost.advance(
        prev, state.tally, samples, jobs, cost.stage_rates(jobs, pool_of, vc_status),
        vc_status, datetime.now(UTC), frozen=frozen, listed_at=listed_at)
    if state.cost:  # a run that ended before anything was priced has no cost
        p.status["cost"] = state.cost
