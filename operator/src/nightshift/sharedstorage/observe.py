"""What a SharedStorage pass reads: the object, what validation needs from the cluster
(the namespace's VirtualClusters, the StorageClasses), its own objects, the Gluster
server pods, the squids' cache managers, and the runs that use it (when deleting).

Every read is a GET or a labeled LIST, and only the kinds the storage's type makes.
The squids' figures are the one read that is not the API server's: an HTTP GET of
each ready squid's `mgr:counters` page (rates since the previous reading), optional
(a squid that does not answer leaves the figures out, never fails the pass), bounded
by SQUID_BUDGET_S in all, and at most every SQUID_TTL_S per storage.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from nightshift.api import credsecret, names, podstate, refusals
from nightshift.api.conditions import parse_rfc3339
from nightshift.kube import Kube, KubeError
from nightshift.pipelinerun.spec import TERMINAL_PHASES
from nightshift.sharedstorage import gluster, reclaim, squid
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.objects import (
    COMPONENT_GLUSTER_CLIENT,
    COMPONENT_GLUSTER_SERVER,
    COMPONENT_NFS_SERVER,
    COMPONENT_SQUID,
    Platform,
    Storage,
)
from nightshift.sharedstorage.plantypes import CLUSTER_KINDS, NAMESPACED_KINDS, Observed, server_pod
from nightshift.sharedstorage.spec import SharedStorageSpec
from nightshift.sharedstorage.status import (
    SquidCounters,
    SquidSample,
    parse_squid_counters,
    squid_rates,
)
from nightshift.sharedstorage.validate import ClusterFacts
from nightshift.virtualcluster.observe import CrdCache
from nightshift.virtualcluster.provider import CRD_EC2NODECLASS

Obj = dict[str, Any]

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
# All squids of a storage answer within this many seconds together, or are left out.
SQUID_BUDGET_S = 2.0
SQUID_TTL_S = 30.0
# Pending pods read while the storage is not Ready, to say why (api/podstate.py).
PODS_READ = 3
# Running pods read while the storage is not Ready, for a daemon that keeps exiting: a
# crash loop is not one pod's luck, a few dozen show it (api/podstate.crash_looping).
CRASH_READ = 20
# A squid's 5-minute page is a few KB; never read more than this.
MAX_PAGE = 1 << 20

Fetch = Callable[[str, float], str]


def http_get(url: str, timeout: float) -> str:
    """GET `url` directly (never through an HTTP proxy from the environment)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as resp:
        body: bytes = resp.read(MAX_PAGE)
    return body.decode(errors="replace")


@dataclass
class SquidSampler:
    """Reads the squids' cache managers, remembering the last samples for a while."""

    fetch: Fetch = http_get
    budget: float = SQUID_BUDGET_S
    ttl: float = SQUID_TTL_S
    clock: Callable[[], float] = time.monotonic
    # Readings are dated by the wall clock: the first one's rate runs from the
    # container's start, which the kubelet gives as a date.
    wall: Callable[[], float] = time.time
    _seen: dict[tuple[str, str], tuple[float, list[SquidSample]]] = field(default_factory=dict)
    # The last reading of each squid pod (by uid), per storage: the next one's baseline.
    _last: dict[tuple[str, str], dict[str, SquidCounters]] = field(default_factory=dict)

    def samples(self, namespace: str, name: str, pods: Sequence[Mapping[str, Any]]
                ) -> list[SquidSample]:
        key = (namespace, name)
        now = self.clock()
        cached = self._seen.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        out: list[SquidSample] = []
        last = self._last.get(key, {})
        readings: dict[str, SquidCounters] = {}
        deadline = now + self.budget
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            uid = str(pod.get("metadata", {}).get("uid") or ip)
            left = deadline - self.clock()
            if not ip or not podstate.ready(pod) or left <= 0:
                continue
            try:
                text = self.fetch(f"http://{ip}:{squid.PORT}{squid.STATS_PATH}", min(left, 2.0))
                reading = parse_squid_counters(text, self.wall())
            except (OSError, ValueError):
                continue  # optional figures: a squid starting or refusing is left out
            readings[uid] = reading
            rates = squid_rates(last.get(uid), reading, _started(pod))
            if rates is not None:
                out.append(rates)
        self._seen[key] = (now + self.ttl, out)
        self._last[key] = readings  # pods gone since are dropped with their readings
        return out

    def forget(self, namespace: str, name: str) -> None:
        self._seen.pop((namespace, name), None)
        self._last.pop((namespace, name), None)


@dataclass(frozen=True)
class Sources:
    """What a pass reads besides the API server's objects, built once."""

    crds: CrdCache = field(default_factory=CrdCache)
    sampler: SquidSampler = field(default_factory=SquidSampler)
    # The cluster's pod and node ranges, when the operator is told them: the squids'
    # default clients and the bound on allowedCIDRs (validate).
    cluster_cidrs: tuple[str, ...] = ()
    image_registry: str = ""
    image_tag: str = ""
    # Seconds a LoadBalancer Service may wait for its address before the status says so.
    load_balancer_grace: float = 120.0


def observe(kube: Kube, sources: Sources, namespace: str, name: str,
            now: datetime) -> Observed | None:
    """Everything the planner needs; None when the object is gone."""
    obj = kube.get(names.API_VERSION, names.SHAREDSTORAGE, name, namespace)
    if obj is None:
        sources.sampler.forget(namespace, name)
        return None
    deleting = bool(obj["metadata"].get("deletionTimestamp"))
    try:
        spec: SharedStorageSpec | None = SharedStorageSpec.model_validate(obj.get("spec") or {})
    except ValidationError:
        spec = None
    platform: Platform = "aws" if CRD_EC2NODECLASS in sources.crds.installed(kube) else "local"
    if spec is None:
        return Observed(storage=obj, facts=ClusterFacts(), platform=platform,
                        owned=owned(kube, namespace, name, "nfs") if deleting else [],
                        running_runs=running_runs(kube, namespace, name) if deleting else (),
                        now=now)
    servers = []
    samples: list[SquidSample] = []
    server_pods: list[Obj] = []
    if spec.type == "glusterfs":
        server_pods = _pods(kube, namespace, name, COMPONENT_GLUSTER_SERVER)
        servers = [server_pod(p) for p in server_pods] if not deleting else []
    elif spec.type == "nfs" and spec.nfs is not None and spec.nfs.backing.local_disk:
        server_pods = _pods(kube, namespace, name, COMPONENT_NFS_SERVER)
    server_nodes = [str((p.get("spec") or {}).get("nodeName") or "") for p in server_pods]
    existing: frozenset[str] = frozenset()
    unready: dict[str, str] = {}
    # Which data nodes still exist matters only to a deletion that reclaims their data.
    if deleting and reclaim.wanted(Storage.of(obj), spec,
                                   obj["metadata"].get("annotations") or {}):
        wanted = {*((obj.get("status") or {}).get("dataNodes") or []), *server_nodes} - {""}
        found = {n: kube.get("v1", "Node", n) for n in wanted}
        existing = frozenset(n for n, node in found.items() if node is not None)
        unready = {n: why for n, node in found.items()
                   if node is not None and (why := reclaim.not_ready(node))}
    if spec.type == "cvmfs" and not deleting:
        samples = sources.sampler.samples(namespace, name,
                                          _pods(kube, namespace, name, COMPONENT_SQUID))
    ours = owned(kube, namespace, name, spec.type)
    stuck: list[podstate.NotStarting] = []
    refused: list[tuple[str, str, str]] = []
    claims: dict[str, str] = {}
    if not deleting and (obj.get("status") or {}).get("phase") != "Ready":
        # Not Ready: a few Pending pods say whether an image or a node is missing.
        stuck = _not_starting(kube, namespace, f"{names.LABEL_STORAGE}={name}")
        running = kube.list("v1", "Pod", namespace,
                            label_selector=f"{names.LABEL_STORAGE}={name}",
                            field_selector="status.phase=Running", limit=CRASH_READ)
        stuck += _crash_looping(running)
        if spec.type == "glusterfs":
            stuck += not_mounted(kube, namespace, running, now)
        refused = _refused(kube, namespace, ours, now)
        claims = _claims_waiting(kube, namespace, ours)
    elif deleting:  # the reclaim Jobs (reclaim.py), which the deletion waits for
        jobs = [o for o in ours if o["kind"] == "Job"]
        refused = _refused(kube, namespace, jobs, now)
        if any(ssstatus.short(j) for j in jobs):
            # A reclaim pod that does not start (its image, say) would leave the
            # deletion saying "removing" for ever: a few Pending ones say why.
            stuck = _not_starting(kube, namespace, (
                f"{names.LABEL_STORAGE}={name},"
                f"{names.LABEL_COMPONENT}={reclaim.COMPONENT_RECLAIM}"))
    # The squids' load balancer, past its grace with no address: what its controller said.
    lb = [o for o in ours if o["kind"] == "Service" and not deleting
          and ssstatus.lb_waiting(o, now, sources.load_balancer_grace)]
    return Observed(
        storage=obj, facts=facts(kube, namespace, spec, sources.cluster_cidrs),
        platform=platform, owned=ours,
        server_pods=servers, squid=samples, server_nodes=server_nodes,
        server_pods_left=len(server_pods), existing_nodes=existing,
        unready_nodes=unready,
        running_runs=running_runs(kube, namespace, name) if deleting else (), now=now,
        image_registry=sources.image_registry, image_tag=sources.image_tag,
        pods_not_starting=stuck, pods_refused=refused, claims_waiting=claims,
        load_balancer_events=_events(kube, namespace, lb[0]) if lb else (),
        secret_problem=_secret_problem(kube, namespace, spec) if not deleting else "",
        load_balancer_grace=sources.load_balancer_grace)


def _claims_waiting(kube: Kube, namespace: str, ours: Sequence[Obj]) -> dict[str, str]:
    """What the newest event of each of our Pending claims says (the volume provisioner's
    words: none installed, a class it refuses): one LIST by its uid each, only while the
    storage is not Ready (a storage has one data claim at most besides its clients')."""
    out = {}
    for obj in ours:
        if obj["kind"] != "PersistentVolumeClaim" or ssstatus.claim_bound(obj):
            continue
        meta = obj["metadata"]
        if (said := ssstatus.claim_says(_events(kube, namespace, obj))) is not None:
            out[str(meta["name"])] = said
    return out


def _events(kube: Kube, namespace: str, obj: Obj, reason: str = "") -> list[Obj]:
    """One object's events (of `reason`, when given): one LIST by its uid."""
    field = f"involvedObject.uid={obj['metadata'].get('uid')}"
    return kube.list("v1", "Event", namespace, limit=refusals.EVENTS_READ,
                     field_selector=f"{field},reason={reason}" if reason else field)


def _crash_looping(running: Sequence[Obj]) -> list[podstate.NotStarting]:
    """Running pods of ours (one LIST, CRASH_READ pods) whose daemon keeps exiting: one
    per container name, as every pod of a DaemonSet or Deployment crashes alike."""
    out: dict[str, podstate.NotStarting] = {}
    for found in map(podstate.crash_looping, running[:CRASH_READ]):
        if found is not None:
            out.setdefault(found.container, found)
    return list(out.values())


def not_mounted(kube: Kube, namespace: str, running: Sequence[Obj], now: datetime
                ) -> list[podstate.NotStarting]:
    """Why the first Running, not ready Gluster client of `running` has not mounted: its
    readiness probe prints the client's last failure (gluster.CLIENT_WHY), which the
    kubelet's Unhealthy event carries (one LIST by its uid). The client goes on trying,
    so it never crash-loops for a volume it cannot mount."""
    for pod in running[:CRASH_READ]:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if (labels.get(names.LABEL_COMPONENT) != COMPONENT_GLUSTER_CLIENT
                or podstate.ready(pod) or podstate.crash_looping(pod) is not None):
            continue
        said = podstate.probe_says(_events(kube, namespace, pod, podstate.UNHEALTHY), now)
        return [] if said is None else [podstate.NotStarting(
            str(pod["metadata"].get("name", "")), podstate.NOT_MOUNTED, said,
            gluster.CLIENT_CONTAINER)]
    return []


def _refused(kube: Kube, namespace: str, ours: Sequence[Obj], now: datetime
             ) -> list[tuple[str, str, str]]:
    """(kind, name, refusal) of each StatefulSet, DaemonSet or Job of ours short of pods
    whose controller's newest FailedCreate event of the last minutes says the API server
    refused them: one LIST by its uid each (a storage has two at most)."""
    out = []
    for obj in ours:
        if obj["kind"] not in ("StatefulSet", "DaemonSet", "Job") or not ssstatus.short(obj):
            continue
        meta = obj["metadata"]
        events = _events(kube, namespace, obj, refusals.FAILED_CREATE)
        if (got := refusals.newest(events, now)) is not None:
            out.append((str(obj["kind"]), str(meta["name"]), got[1]))
    return out


def _secret_problem(kube: Kube, namespace: str, spec: SharedStorageSpec) -> str:
    """An s3 storage's credentialsSecret, checked as a run's item listing checks it: a
    storage that said Ready over a Secret that is not there left it to each run."""
    name = spec.s3.credentials_secret if spec.type == "s3" and spec.s3 else None
    if not name:
        return ""
    try:
        secret = kube.get("v1", "Secret", name, namespace)
    except KubeError as e:
        if e.status != 403:
            raise
        return ""  # RBAC grants Secrets by name (operator.secretNames): not ours to judge
    why = credsecret.problem(secret, name)
    return f"spec.s3.credentialsSecret: {why}" if why else ""


def facts(kube: Kube, namespace: str, spec: SharedStorageSpec,
          cluster_cidrs: Sequence[str]) -> ClusterFacts:
    """What validate checks the spec against; only what this spec refers to is read."""
    vcs: dict[str, list[str]] | None = None
    modes: dict[str, str] | None = None
    taints: dict[str, list[dict[str, Any]]] = {}
    if spec.virtual_cluster:
        vcs, modes = {}, {}
        for vc in kube.list(names.API_VERSION, names.VIRTUALCLUSTER, namespace):
            pools = ((vc.get("spec") or {}).get("pools")) or []
            vcs[str(vc["metadata"]["name"])] = [str(p.get("name")) for p in pools]
            if vc["metadata"]["name"] == spec.virtual_cluster:
                # Only well-formed ones (the CRD requires a key; an object stored
                # before that rule must not stop the storage's every pass).
                taints = {str(p.get("name")): [dict(t) for t in p.get("taints") or []
                                               if isinstance(t, dict) and t.get("key")]
                          for p in pools}
            if mode := (vc.get("status") or {}).get("mode"):
                modes[str(vc["metadata"]["name"])] = str(mode)
    classes: set[str] | None = None
    default = None
    if spec.type == "nfs" and spec.nfs is not None and spec.nfs.backing.pvc is not None:
        classes = set()
        for sc in kube.list("storage.k8s.io/v1", "StorageClass"):
            classes.add(str(sc["metadata"]["name"]))
            if (sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true":
                default = str(sc["metadata"]["name"])
    return ClusterFacts(virtual_clusters=vcs, virtual_cluster_modes=modes,
                        storage_classes=classes,
                        default_storage_class=default, cluster_cidrs=list(cluster_cidrs),
                        pool_taints=taints)


def owned(kube: Kube, namespace: str, name: str, type_: str) -> list[Obj]:
    """Our objects of the kinds this type makes, by label: one LIST per kind."""
    out: list[Obj] = []
    for api_version, kind in NAMESPACED_KINDS.get(type_, ()):
        out += kube.list(api_version, kind, namespace,
                         label_selector=f"{names.LABEL_STORAGE}={name}")
    for api_version, kind in CLUSTER_KINDS.get(type_, ()):
        out += kube.list(api_version, kind, label_selector=(
            f"{names.LABEL_STORAGE}={name},{names.LABEL_STORAGE_NAMESPACE}={namespace}"))
    return out


def _not_starting(kube: Kube, namespace: str, selector: str) -> list[podstate.NotStarting]:
    """Why a few of the selected Pending pods do not start (one LIST, PODS_READ pods)."""
    pending = kube.list("v1", "Pod", namespace, label_selector=selector,
                        field_selector="status.phase=Pending", limit=PODS_READ)
    return [p for p in map(podstate.not_starting, pending[:PODS_READ]) if p]


def _pods(kube: Kube, namespace: str, name: str, component: str) -> list[Obj]:
    return kube.list("v1", "Pod", namespace, label_selector=(
        f"{names.LABEL_STORAGE}={name},{names.LABEL_COMPONENT}={component}"))


def _started(pod: Mapping[str, Any]) -> float | None:
    """When the squid container (last) started, as epoch seconds (the kubelet's clock,
    compared with the operator's wall clock: both NTP-synced on EKS)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        at = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        if at:
            try:
                started = parse_rfc3339(str(at))
            except ValueError:
                return None
            return started.timestamp() if started else None
    return None


def refers_to(run: Mapping[str, Any], storage: str) -> bool:
    """Whether a PipelineRun's spec.storage names this SharedStorage."""
    return any(isinstance(s, Mapping) and s.get("sharedStorage") == storage
               for s in (run.get("spec") or {}).get("storage") or [])


def running_runs(kube: Kube, namespace: str, name: str) -> list[str]:
    """PipelineRuns of the namespace that name this storage and have not ended."""
    out = []
    for run in kube.list(names.API_VERSION, names.PIPELINERUN, namespace):
        if not refers_to(run, name) or run["metadata"].get("deletionTimestamp"):
            continue
        if (run.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        out.append(str(run["metadata"]["name"]))
    return sorted(out)
