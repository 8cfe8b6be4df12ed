"""The SharedStorage decision: what was observed in, what to do and the status out.

Pure and level-based, like the VirtualCluster planner: no I/O and no clock. Every pass
validates against what the cluster holds (an invalid storage gets an Invalid condition
naming the field and nothing is applied, so nothing is left half made), renders the
workloads, re-applies whatever drifted, prunes what is ours but no longer rendered, and
computes the whole status and the events of its condition transitions.

Two objects depend on what was observed, not on the spec alone: the NFS clients'
PersistentVolume and claim (the server Service's ClusterIP) and the Gluster volume Job
(every server pod ready, and server 0's node). The Job is applied once, never
re-applied: its template pins a node and is immutable.

Pruning never touches an object that lacks this storage's ownerReference: the NFS data
claim under `reclaimPolicy: Retain` carries the storage label but no owner, so it
outlives the storage whatever happens here. The cluster-scoped NFS PersistentVolume
cannot have a namespaced owner; it is found by its labels and deleted explicitly.

Deletion: our finalizer (nightshift.io/shared-storage) keeps the object while
PipelineRuns that name it have not ended, unless it is annotated
nightshift.io/force-delete: "true"; then the NFS clients' claim and PersistentVolume
go (the PV only points at the server; its files stay), and the finalizer, after which
the garbage collector removes every owned object. Data stays unless `reclaimPolicy:
Delete` (the NFS data claim is then owned and goes too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from nightshift.api import deletion, names
from nightshift.api.conditions import READY, false_for, rfc3339
from nightshift.api.drift import drifted
from nightshift.api.events import condition_events
from nightshift.sharedstorage import gluster, glustervolume, nfs, reclaim, render
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.objects import Storage, with_images
from nightshift.sharedstorage.plantypes import (
    CLIENT_ROLES,
    Obj,
    Observed,
    Plan,
)
from nightshift.sharedstorage.spec import SharedStorageSpec
from nightshift.sharedstorage.validate import (
    effective_squid_cidrs,
    validate,
    virtual_cluster_mode,
)

DELETING = deletion.DELETING
# Look again soon while something is on its way (pods starting, a claim binding, the
# volume Job running), later after an error; when all is Ready the resync applies.
BUSY_REQUEUE = 10.0
ERROR_REQUEUE = 30.0
# Not Ready for this long (a pool with no node, a quota): look every SLOW_REQUEUE, not
# every 10 s, so the reads that say why are not repeated for hours. Events of its pods
# and workloads still wake it at once.
LONG_NOT_READY = 300.0
SLOW_REQUEUE = 60.0

def plan(o: Observed) -> Plan:
    meta = o.storage["metadata"]
    mine = names.FINALIZER_SHARED_STORAGE in (meta.get("finalizers") or [])
    deleting = bool(meta.get("deletionTimestamp"))
    if deleting and not mine:
        return Plan(gone=True)
    try:
        spec: SharedStorageSpec | None = SharedStorageSpec.model_validate(
            o.storage.get("spec") or {})
        spec_error: ValidationError | None = None
    except ValidationError as e:
        spec, spec_error = None, e
    if deleting:
        annotations = meta.get("annotations") or {}
        forced = annotations.get(names.ANNOTATION_FORCE_DELETE) == "true"
        if not o.running_runs or forced:
            if spec is not None and reclaim.wanted(Storage.of(o.storage), spec, annotations):
                p = _reclaim(o, spec)
                if p is not None:
                    return p
            return _finalize(o)
    add = not mine and not deleting
    if spec is None:
        assert spec_error is not None  # noqa: S101  (invariant for mypy: no spec means an error)
        return _status_plan(o, _unreadable_status(o, spec_error), ERROR_REQUEUE,
                            add_finalizer=add)
    return _steady(o, spec, add_finalizer=add, deleting=deleting)


def _key(obj: Obj) -> tuple[str, str]:
    return str(obj["kind"]), str(obj["metadata"]["name"])


def _steady(o: Observed, spec: SharedStorageSpec, *, add_finalizer: bool,
            deleting: bool) -> Plan:
    mode, wait = virtual_cluster_mode(spec, o.facts)
    # Parsed once, with its placement facts, for its workloads and its dependents (the
    # NFS clients, the Gluster volume Job).
    st = Storage.of(o.storage, karpenter_nodes=mode == names.MODE_KARPENTER,
                    pool_taints=o.facts.pool_taints)
    problems = validate(spec, st.name, o.facts)
    present = {_key(obj): obj for obj in o.owned}
    apply: list[dict[str, Any]] = []
    prune: list[dict[str, str]] = []
    if not problems and not deleting and not wait:
        rendered = render.render_workloads(st, platform=o.platform,
                                           squid_cidrs=effective_squid_cidrs(spec, o.facts))
        rendered += _observed_dependents(st, present, o.server_pods)
        rendered = with_images(rendered, o.image_registry, o.image_tag)
        wanted = {_key(m) for m in rendered}
        if spec.type == "glusterfs":
            # Made once (immutable template); its success is the volume's record.
            wanted.add(("Job", gluster.volume_job_name(st)))
        apply = [m for m in rendered
                 if drifted(m, present.get(_key(m)))
                 and not (m["kind"] == "Job" and _key(m) in present)]
        prune = [_ref(obj) for obj in o.owned
                 if _key(obj) not in wanted and _prunable(obj, st)]
    figures = (ssstatus.Observed() if problems else ssstatus.Observed(not_ready=[wait])
               if wait else _figures(o, st, spec, present))
    status = ssstatus.storage_status(o.storage, observed=figures, problems=problems,
                                     deleting=deleting, now=rfc3339(o.now))
    if reclaim.data_dirs(st, spec):
        status["dataNodes"] = reclaim.data_nodes(
            (o.storage.get("status") or {}).get("dataNodes") or [], o.server_nodes)
    if deleting:
        status["conditions"] = _with_deleting(o, status["conditions"], blocked(st, o.running_runs))
    ready = status["phase"] == "Ready"
    requeue: float | None = None
    if problems or o.errors:
        requeue = ERROR_REQUEUE
    elif deleting or not ready:
        long = false_for((o.storage.get("status") or {}).get("conditions"), READY, o.now)
        requeue = SLOW_REQUEUE if not deleting and long >= LONG_NOT_READY else BUSY_REQUEUE
    elif (age := ssstatus.lb_pending(present.get(("Service", st.object_name("squid"))),
                                     o.now)) is not None and age < o.load_balancer_grace:
        requeue = o.load_balancer_grace - age  # to say so once the grace is over
    if o.errors:
        # The writes this plan asked for met errors: not again in this pass, and no
        # pruning while the new set is not in place; the next pass retries.
        apply, prune = [], []
    return Plan(add_finalizer=add_finalizer, apply=apply, prune=prune, status=status,
                events=condition_events((o.storage.get("status") or {}).get("conditions"),
                                        status["conditions"]),
                requeue_after=requeue,
                awaiting_virtual_cluster=spec.virtual_cluster if wait else None)


def _observed_dependents(st: Storage, present: Mapping[tuple[str, str], Obj],
                         servers: Sequence[gluster.ServerPod]) -> list[dict[str, Any]]:
    """The objects that need something observed first."""
    if st.spec.type == "nfs":
        ip = _cluster_ip(present.get(("Service", st.object_name("nfs"))))
        if not ip:
            return []
        client = nfs.render_nfs_client(st, ip)
        held = present.get(("PersistentVolume", client[0]["metadata"]["name"]))
        if held is not None and _nfs_source(held) != _nfs_source(client[0]):
            # A PV's source is immutable: the Service re-created with another address, or
            # exportOptions.accessType changed (the source's readOnly). This pass prunes
            # the PV and its claim, the next makes them anew.
            return []
        return client
    if st.spec.type == "glusterfs" and ("Job", gluster.volume_job_name(st)) not in present:
        job = glustervolume.volume_job(st, servers)
        return [job] if job else []
    return []


def _nfs_source(pv: Obj) -> dict[str, Any]:
    """A PV's nfs source without the values the server does not keep (readOnly false)."""
    return {k: v for k, v in ((pv.get("spec") or {}).get("nfs") or {}).items() if v}


def _cluster_ip(svc: Obj | None) -> str:
    ip = str(((svc or {}).get("spec") or {}).get("clusterIP") or "")
    return "" if ip == "None" else ip


def _prunable(obj: Obj, st: Storage) -> bool:
    """Ours to delete: owned by this storage (by uid), or its cluster-scoped PV. A
    Retain'ed NFS data claim has no owner and is never pruned."""
    meta = obj["metadata"]
    if obj["kind"] == "PersistentVolume":
        labels = meta.get("labels") or {}
        return (labels.get(names.LABEL_STORAGE) == st.name
                and labels.get(names.LABEL_STORAGE_NAMESPACE) == st.namespace)
    return any(r.get("uid") == st.uid and r.get("kind") == names.SHAREDSTORAGE
               for r in meta.get("ownerReferences") or [])


def _ready_replicas(obj: Obj | None) -> int:
    return int(((obj or {}).get("status") or {}).get("readyReplicas") or 0)


def _figures(o: Observed, st: Storage, spec: SharedStorageSpec,
             present: Mapping[tuple[str, str], Obj]) -> ssstatus.Observed:
    """The status figures of what was observed, and what is still missing."""
    secret = [o.secret_problem] if o.secret_problem else []
    not_ready = [*o.errors, *secret, *ssstatus.workloads_not_ready(
        spec.type, st.namespace, o.pods_not_starting, o.pods_refused, present.values())]
    if said := reclaim.moved(st, spec, (o.storage.get("status") or {}).get("dataNodes") or [],
                             o.server_nodes):
        not_ready.append(said)
    if spec.type == "nfs" and spec.nfs is not None:
        ip = _cluster_ip(present.get(("Service", st.object_name("nfs"))))
        data = present.get(("PersistentVolumeClaim", nfs.data_claim_name(st)))
        capacity = (((data or {}).get("status") or {}).get("capacity") or {}).get("storage")
        pvc = spec.nfs.backing.pvc
        if pvc is not None and not ssstatus.claim_bound(data):
            name = nfs.data_claim_name(st)
            said = o.claims_waiting.get(name)
            not_ready.append(f"claim {name} (the export's disk) is not bound: {said}; check "
                             "spec.nfs.backing.pvc.storageClass: its provisioner must run in "
                             "the cluster" if said else f"claim {name} is not bound yet")
        if not ip:
            not_ready.append(f"Service {st.object_name('nfs')} has no ClusterIP yet")
        else:
            not_ready += _claim_state(st, present, "nfs")
        return ssstatus.Observed(
            servers_wanted=1,
            servers_ready=_ready_replicas(present.get(("Deployment", st.object_name("nfs")))),
            endpoints=render.endpoints(o.storage, service_ip=ip or None),
            capacity=capacity or (pvc.size if pvc else None), not_ready=not_ready)
    if spec.type == "glusterfs" and spec.glusterfs is not None:
        not_ready += glustervolume.job_state(st, present.get(("Job", gluster.volume_job_name(st))))
        not_ready += _claim_state(st, present, "gluster")
        return ssstatus.Observed(
            servers_wanted=spec.glusterfs.servers,
            servers_ready=_ready_replicas(present.get(("StatefulSet", gluster.server_name(st)))),
            clients=ssstatus.daemonset_counts(
                present.get(("DaemonSet", st.object_name("gluster-client")))),
            endpoints=render.endpoints(o.storage), not_ready=not_ready)
    if spec.type == "cvmfs" and spec.cvmfs is not None:
        svc = present.get(("Service", st.object_name("squid")))
        ingress = (((svc or {}).get("status") or {}).get("loadBalancer") or {}).get(
            "ingress") or []
        lb = (ingress[0].get("hostname") or ingress[0].get("ip")) if ingress else None
        not_ready += _claim_state(st, present, "cvmfs")
        return ssstatus.Observed(
            servers_wanted=spec.cvmfs.squid.replicas.min,
            servers_ready=_ready_replicas(present.get(("Deployment", st.object_name("squid")))),
            clients=ssstatus.daemonset_counts(
                present.get(("DaemonSet", st.object_name("cvmfs-client")))),
            endpoints=render.endpoints(o.storage, load_balancer=lb),
            squid=list(o.squid), not_ready=not_ready,
            squid_scaling=ssstatus.hpa_problem(present.get(
                ("HorizontalPodAutoscaler", st.object_name("squid"))), st.namespace),
            squid_load_balancer=ssstatus.lb_problem(
                svc, o.load_balancer_events, o.now, o.load_balancer_grace,
                aws=o.platform == "aws"))
    return ssstatus.Observed(endpoints=render.endpoints(o.storage), not_ready=not_ready)


def _claim_state(st: Storage, present: Mapping[tuple[str, str], Obj], role: str) -> list[str]:
    """Why pipeline pods cannot use the clients' claim yet (it binds to its own PV)."""
    name = st.object_name(f"{role}-client")
    claim = present.get(("PersistentVolumeClaim", name))
    if ((claim or {}).get("status") or {}).get("phase") == "Bound":
        return []
    return [f"claim {name} is not bound yet"]


def _finalize(o: Observed) -> Plan:
    """The last deletion step: the cluster-scoped PV and the claim bound to it (a bound
    PV waits for its claim), then the finalizer. Owned objects go with the storage."""
    st_meta = o.storage["metadata"]
    # The clients' claims (nfs.client_claim_name...), without a spec that may not parse.
    claims = {f"{st_meta['name']}-{role}-client" for role in CLIENT_ROLES.values()}
    refs = [_ref(obj) for obj in o.owned
            if (obj["kind"] == "PersistentVolume"
                or (obj["kind"] == "PersistentVolumeClaim" and obj["metadata"]["name"] in claims))
            and not obj["metadata"].get("deletionTimestamp")]
    if o.errors:
        status = dict(o.storage.get("status") or {})
        status["conditions"] = _with_deleting(o, list(status.get("conditions") or []), (
            "CleanupFailed", "; ".join(o.errors)))
        return _status_plan(o, status, ERROR_REQUEUE)
    return Plan(prune=refs, remove_finalizer=True, gone=True)


def _reclaim(o: Observed, spec: SharedStorageSpec) -> Plan | None:
    """The reclaimPolicy Delete steps (reclaim.py); None once the data is gone."""
    st = Storage.of(o.storage)
    status = dict(o.storage.get("status") or {})
    nodes = reclaim.data_nodes(status.get("dataNodes") or [], o.server_nodes)
    image = gluster.IMAGE if spec.type == "glusterfs" else nfs.IMAGE
    apply, delete, why = reclaim.step(st, spec, owned=o.owned, nodes=nodes,
                                      existing_nodes=o.existing_nodes,
                                      server_nodes=o.server_nodes,
                                      unready=o.unready_nodes,
                                      server_pods_left=o.server_pods_left, image=image)
    if why is None:
        return None
    if o.errors:  # what applying this step met: shown, and nothing applied again
        why, apply, delete = ("ReclaimFailed", "; ".join(o.errors)), [], []
    elif why[0] == "Reclaiming" and (
            (refused := [r for r in o.pods_refused if r[0] == "Job"]) or o.pods_not_starting):
        # A reclaim Job whose pod the API server refuses, or whose pod does not start,
        # would say "removing" for ever.
        why = (why[0], "; ".join([
            why[1], *ssstatus.pods_refused(st.namespace, refused),
            *ssstatus.pods_not_starting(spec.type, o.pods_not_starting, st.namespace)]))
    status["phase"] = "Deleting"
    status["dataNodes"] = nodes
    status["conditions"] = _with_deleting(o, list(status.get("conditions") or []), why)
    return _status_plan(o, status, BUSY_REQUEUE if why[0] == "Reclaiming" else ERROR_REQUEUE,
                        apply=with_images(apply, o.image_registry, o.image_tag),
                        prune=[_ref(d) for d in delete])


def blocked(st: Storage, runs: Sequence[str]) -> tuple[str, str]:
    return deletion.blocked("sharedstorage", st.namespace, st.name, runs,
                            "their running tasks then lose it")


def _with_deleting(o: Observed, conds: list[dict[str, Any]],
                   why: tuple[str, str]) -> list[dict[str, Any]]:
    return deletion.with_deleting(o.storage, conds, why, rfc3339(o.now))


def _status_plan(o: Observed, status: dict[str, Any], requeue: float | None,
                 **kw: Any) -> Plan:
    return Plan(status=status, requeue_after=requeue, events=condition_events(
        (o.storage.get("status") or {}).get("conditions"), status.get("conditions")), **kw)


def _unreadable_status(o: Observed, e: ValidationError) -> dict[str, Any]:
    return deletion.unreadable_status(o.storage, e, rfc3339(o.now), phase="Failed")


def _ref(obj: Obj) -> dict[str, str]:
    ref = {"apiVersion": str(obj["apiVersion"]), "kind": str(obj["kind"]),
           "name": str(obj["metadata"]["name"])}
    if obj["metadata"].get("namespace"):
        ref["namespace"] = str(obj["metadata"]["namespace"])
    return ref
