"""A SharedStorage's status from what the I/O layer observed. Pure: figures in, dict out.

Client mounts are counts (nodes that should mount, nodes whose mounter is ready), never
node lists: a storage mounted on a thousand nodes keeps a status of a few hundred bytes.
Squid figures come from each squid's cache manager (`mgr:counters`, cumulative totals):
rates between two readings, summed over the squids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nightshift.api import conditions, names, podstate, refusals
from nightshift.api.problems import Problem, summarize

_COUNTER = re.compile(r"^\s*(client_http\.requests|client_http\.hits)\s*=\s*([0-9]+)", re.M)


@dataclass(frozen=True)
class SquidSample:
    """One squid's client request and hit rates over the interval the sampler saw."""

    requests_per_second: float
    hits_per_second: float


@dataclass(frozen=True)
class SquidCounters:
    """One reading of a squid's cumulative counters, taken at `at` (epoch seconds).

    `at` is the reader's clock: squid's own sample_time on this page is when its
    counters last moved, not when they were read."""

    at: float
    requests: int
    hits: int


def parse_squid_counters(text: str, at: float) -> SquidCounters:
    """The client request and hit totals from squid's `mgr:counters`, read at `at`."""
    found = {m.group(1): int(m.group(2)) for m in _COUNTER.finditer(text)}
    if "client_http.requests" not in found:
        raise ValueError("no client_http.requests line: not a squid mgr:counters page")
    return SquidCounters(at, found["client_http.requests"], found.get("client_http.hits", 0))


def squid_rates(prev: SquidCounters | None, now: SquidCounters,
                started: float | None) -> SquidSample | None:
    """Rates between two readings of one squid. The first reading, or one after a restart
    (the totals went back), counts from the squid's start; None when neither is known.

    Squid's own 5- and 60-minute averages were not used: they move only with its
    once-a-minute snapshots, which a squid on the real node was seen not to take for
    minutes, leaving a busy squid at 0 requests per second."""
    if prev is not None and now.at > prev.at and now.requests >= prev.requests:
        dt = now.at - prev.at
        return SquidSample((now.requests - prev.requests) / dt, (now.hits - prev.hits) / dt)
    if started is not None and now.at > started:
        dt = now.at - started
        return SquidSample(now.requests / dt, now.hits / dt)
    return None


@dataclass(frozen=True)
class Clients:
    """A client DaemonSet's counts: nodes that should mount, nodes whose client is
    ready, and nodes whose client runs an older template, with what moves them."""

    nodes: int
    mounted: int
    outdated: int = 0
    how: str = ""
    # Where a client that does not mount says why: the kubectl logs that read it.
    logs: str = ""


def daemonset_counts(ds: Mapping[str, Any] | None) -> Clients:
    """The client DaemonSet's Clients. Its clients are never restarted under running
    pods (updateStrategy OnDelete: a remount pulls /cvmfs or the volume from under
    them), so a changed spec reaches a node only when its client pod is deleted; until
    then the storage is Ready with the old configuration there, which `outdated` says."""
    st = (ds or {}).get("status") or {}
    nodes, mounted = int(st.get("desiredNumberScheduled", 0)), int(st.get("numberReady", 0))
    meta = (ds or {}).get("metadata") or {}
    match = (((ds or {}).get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    labels = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    logs = f"kubectl logs -n {meta.get('namespace', '')} -l {labels} --tail=20" if labels else ""
    if ds is None or int(st.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return Clients(nodes, mounted, logs=logs)  # counts of an older template: not known
    # Nodes running a client, less those running the current one (a node whose pod is
    # not made yet is neither). The API server leaves out counts that are 0.
    outdated = int(st.get("currentNumberScheduled", 0)) - int(st.get("updatedNumberScheduled", 0))
    if outdated <= 0:
        return Clients(nodes, mounted, logs=logs)
    return Clients(nodes, mounted, outdated, logs=logs, how=(
        f"{outdated} of {nodes} nodes mount the previous configuration: a client is not "
        "restarted under running pods (updateStrategy OnDelete), so a change reaches a "
        "node when its client pod is deleted, e.g. once the node is idle: kubectl delete "
        f"pod -n {meta.get('namespace', '')} -l {labels} --field-selector "
        "spec.nodeName=<node>"))


@dataclass(frozen=True)
class Observed:
    """What the reconcile saw. `not_ready` holds its own reasons, each with its fix."""

    servers_wanted: int = 0
    servers_ready: int = 0
    # Types with a client DaemonSet (daemonset_counts); None for nfs and s3.
    clients: Clients | None = None
    endpoints: Sequence[Mapping[str, str]] = ()
    capacity: str | None = None
    # cvmfs: the squids' samples ([] when none could be read); None for other types.
    squid: Sequence[SquidSample] | None = None
    # cvmfs: why the squids' autoscaler cannot scale (hpa_problem), when it cannot.
    squid_scaling: str | None = None
    # cvmfs: why its LoadBalancer Service has no address (lb_problem), when it has none.
    squid_load_balancer: str | None = None
    not_ready: Sequence[str] = field(default_factory=tuple)


def _squid(samples: Sequence[SquidSample], ready: int) -> dict[str, Any]:
    if not samples:
        # No cache manager answered (squids starting, or unreachable from the
        # operator): no figures rather than a hit ratio of 0.
        return {"replicas": ready}
    req = sum(s.requests_per_second for s in samples)
    hits = sum(s.hits_per_second for s in samples)
    return {
        "replicas": ready,
        "hitRatio": round(hits / req, 4) if req else 0.0,
        "requestsPerMinute": round(req * 60, 1),
    }


def storage_status(obj: Mapping[str, Any], *, observed: Observed,
                   problems: Sequence[Problem] = (), deleting: bool = False,
                   now: str | None = None) -> dict[str, Any]:
    generation = int(obj.get("metadata", {}).get("generation", 0))
    reasons = list(observed.not_ready)
    if observed.servers_ready < observed.servers_wanted:
        reasons.append(f"{observed.servers_ready} of {observed.servers_wanted} servers ready")
    if observed.clients is not None and observed.clients.mounted < observed.clients.nodes:
        said = (f" (a client that does not mount says why in its log: "
                f"{observed.clients.logs})" if observed.clients.logs else "")
        reasons.append(f"mounted on {observed.clients.mounted} of {observed.clients.nodes} "
                       f"nodes{said}")
    c = conditions
    if problems:
        phase = "Failed"
        invalid = c.condition(c.INVALID, c.TRUE, "InvalidSpec", summarize(problems), generation)
        ready = c.condition(c.READY, c.FALSE, "Invalid", "the spec is invalid (see the "
                            "Invalid condition); nothing was applied", generation)
    else:
        invalid = c.condition(c.INVALID, c.FALSE, "Valid", "", generation)
        if reasons:
            phase = "Pending"
            ready = c.condition(c.READY, c.FALSE, "NotReady", "; ".join(reasons), generation)
        else:
            phase = "Ready"
            ready = c.condition(c.READY, c.TRUE, "Ready", "", generation)
    if deleting:
        phase = "Deleting"
    eps = [dict(e) for e in observed.endpoints]
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "phase": phase,
        "endpoint": eps[0]["url"] if eps else "",
        "endpoints": eps,
        "conditions": c.merge((obj.get("status") or {}).get("conditions"), [ready, invalid],
                              now=now),
    }
    applied = generation if not problems else (obj.get("status") or {}).get(
        "appliedGeneration")
    if applied is not None:
        status["appliedGeneration"] = applied
    if observed.capacity:
        status["capacity"] = observed.capacity
    if observed.clients is not None:
        status["clients"] = {"nodes": observed.clients.nodes,
                             "mounted": observed.clients.mounted}
        if observed.clients.outdated:
            status["clients"].update(outdated=observed.clients.outdated,
                                     update=observed.clients.how)
    if observed.squid is not None:
        status["squid"] = _squid(observed.squid, observed.servers_ready)
        if observed.squid_scaling:
            status["squid"]["scaling"] = observed.squid_scaling
        if observed.squid_load_balancer:
            status["squid"]["loadBalancer"] = observed.squid_load_balancer
    return status


# Where each type names its servers' and its clients' pools.
POOL_FIELDS = {"nfs": ("spec.nfs.pool", "spec.nfs.clients.pools"),
               "glusterfs": ("spec.glusterfs.pool", "spec.glusterfs.clients.pools"),
               "cvmfs": ("spec.cvmfs.squid.pool", "spec.cvmfs.client.pools")}


def workloads_not_ready(type_: str, namespace: str, stuck: Sequence[podstate.NotStarting],
                        refused: Sequence[tuple[str, str, str]],
                        present: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why the storage's workloads are not all running, each with what to check: pods
    that do not start, pods refused (a Deployment says so in its own ReplicaFailure
    condition, the others' events were read into `refused`), rollouts that are stuck."""
    deployments = [obj for obj in present if obj.get("kind") == "Deployment"]
    refused = [*((str(d["kind"]), str(d["metadata"]["name"]), said) for d in deployments
                 if (said := refusals.replica_failure(d)) is not None), *refused]
    return [*pods_not_starting(type_, stuck, namespace), *pods_refused(namespace, refused),
            *(why for d in deployments if (why := rollout_stuck(d)) is not None)]


def pods_not_starting(type_: str, pods: Sequence[podstate.NotStarting],
                      namespace: str = "") -> list[str]:
    """One NotReady reason per pod that does not start by itself, with what to check."""
    out = []
    for p in pods:
        if p.crash_loop:
            fix = (f"its last lines: kubectl logs -n {namespace} {p.pod} -c {p.container} "
                   f"--previous; check spec.{type_}")
        elif p.not_mounted:
            fix = (f"it tries again every 5 s; its log: kubectl logs -n {namespace} {p.pod} "
                   f"-c {p.container}; check spec.{type_}, and that its node reaches the "
                   "servers' nodes (glusterd's port 24007, the bricks' 49152 and up)")
        elif p.image:
            fix = ("check the operator's storage images (the chart's storageImages.registry "
                   "and .tag)")
        elif p.unschedulable and "PersistentVolumeClaim" in p.message:
            fix = "it waits for its claim to be bound (the claim's reason is given here)"
        elif (p.unschedulable and type_ == "cvmfs"
              and "Insufficient ephemeral-storage" in p.message):
            fix = (f"no node of its pool has the disk it requests: lower spec.{type_}"
                   ".squid.diskCache (requested as ephemeral storage), or give the pool's "
                   "nodes a larger root volume (the VirtualCluster's "
                   "nodeClass.blockDeviceMappings)")
        elif p.unschedulable:
            servers, clients = POOL_FIELDS.get(type_, (f"spec.{type_}", f"spec.{type_}"))
            fix = (f"check that {servers} and {clients} have nodes that fit (set "
                   f"spec.virtualCluster, or label nodes {names.LABEL_POOL}=<pool>)")
        else:
            fix = f"kubectl describe pod {p.pod}"
        out.append(f"{p.text()}; {fix}")
    return out


# The refusal as the API server said it, at most this long: the fix after it is whole.
REFUSAL_CHARS = 300


def short(obj: Mapping[str, Any]) -> bool:
    """A workload of ours with fewer pods ready than it wants (a Job: not yet finished
    and no pod running), whose controller may have had pods refused."""
    kind, st = obj.get("kind"), obj.get("status") or {}
    if kind == "StatefulSet":
        want = int((obj.get("spec") or {}).get("replicas", 1))
        return int(st.get("readyReplicas") or 0) < want
    if kind == "DaemonSet":
        return int(st.get("numberReady") or 0) < int(st.get("desiredNumberScheduled") or 0)
    if kind == "Job":
        done = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in st.get("conditions") or [])
        return not done and not int(st.get("active") or 0)
    return False


def pods_refused(namespace: str, refused: Sequence[tuple[str, str, str]]) -> list[str]:
    """One NotReady reason per workload whose pods the API server refuses ((kind, name,
    the refusal, refusals.clean'ed)), with what to check: nothing else says it, as no
    pod exists to read."""
    out = []
    for kind, name, said in refused:
        guard = refusals.kind(said)
        describe = f"kubectl describe {kind.lower()} -n {namespace} {name}"
        if guard == "quota":
            fix = ("its pods are created as the namespace's ResourceQuota frees up; else "
                   "raise it")
        elif guard == "podsecurity":
            fix = ("the storage's servers and mounters need a namespace whose "
                   "pod-security.kubernetes.io/enforce level admits them: privileged for "
                   "the client DaemonSets and Gluster servers (docs/sharedstorage.md)")
        elif guard == "limitrange":
            fix = f"check the namespace's LimitRange against its pods ({describe})"
        else:
            fix = describe
        cut = said if len(said) <= REFUSAL_CHARS else said[:REFUSAL_CHARS - 1] + "…"
        out.append(f"{kind} {name} cannot create its pods: {cut}; {fix}")
    return out


def hpa_problem(hpa: Mapping[str, Any] | None, namespace: str) -> str | None:
    """Why a HorizontalPodAutoscaler cannot scale (its AbleToScale or ScalingActive
    condition False), with what to check; None while it can, or before it has said. The
    squids keep serving at their count, so this is no reason to be not Ready, but without
    it a storage whose squids never scale would look the same as one that needs none."""
    for c in ((hpa or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") in ("AbleToScale", "ScalingActive") and c.get("status") == "False":
            reason = str(c.get("reason") or "")
            if reason == "ScalingDisabled":
                continue  # scaled to zero by hand: not a fault
            name = str(((hpa or {}).get("metadata") or {}).get("name", ""))
            fix = (" the autoscaler reads CPU from the resource metrics API: install "
                   "metrics-server (on EKS, its add-on);" if "metrics" in str(
                       c.get("message") or "") else "")
            said = " ".join(str(c.get("message") or "").split())[:REFUSAL_CHARS]
            return (f"not scaling: {reason}: {said};{fix} kubectl describe hpa -n "
                    f"{namespace} {name}")
    return None


def lb_pending(svc: Mapping[str, Any] | None, now: datetime) -> float | None:
    """Seconds a LoadBalancer Service has been without an address; None for another
    type, or one with an address."""
    if svc is None or (svc.get("spec") or {}).get("type") != "LoadBalancer":
        return None
    if ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress"):
        return None
    made = refusals.parse_time((svc.get("metadata") or {}).get("creationTimestamp"))
    return None if made is None else max(0.0, (now - made).total_seconds())


def lb_waiting(svc: Mapping[str, Any] | None, now: datetime, grace: float) -> bool:
    """A LoadBalancer Service with no address yet, made at least `grace` seconds ago."""
    age = lb_pending(svc, now)
    return age is not None and age >= grace


def lb_problem(svc: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]],
               now: datetime, grace: float, *, aws: bool) -> str | None:
    """Why the squids' LoadBalancer Service has no address `grace` seconds after it was
    made: the newest of its events (a load balancer controller's words: a subnet it
    cannot find, a quota, a refused annotation), or, with none, that nothing in the
    cluster gives addresses. None while it has one, or may still get one. Clients in the
    cluster use the Service's DNS name, so this is no reason to be not Ready; but without
    it a load balancer that never comes looks the same as one on its way."""
    if svc is None or not lb_waiting(svc, now, grace):
        return None
    meta = svc.get("metadata") or {}
    name, namespace = meta.get("name", ""), meta.get("namespace", "")
    head = f"LoadBalancer Service {name} has no address after {_span(grace)}"
    if (found := _newest(events)) is not None:
        newest, said = found
        why = (f"{head}: {newest.get('reason', '')}: {said}; kubectl describe service -n "
               f"{namespace} {name}")
    elif aws:
        why = (f"{head} and no controller has said why: on EKS the AWS Load Balancer "
               "Controller makes its internal NLB (the Service's aws-load-balancer-type: "
               "external annotation asks for it): check that it runs")
    else:
        why = (f"{head} and no controller has said why: this cluster gives LoadBalancer "
               "Services no address unless one is installed (MetalLB, cloud-provider-kind)")
    return (f"{why}; clients in the cluster use its DNS name and are not affected; if no "
            "client outside the cluster needs the squids, set "
            "spec.cvmfs.squid.service.type to ClusterIP")


def _span(seconds: float) -> str:
    return f"{seconds / 60:g} minutes" if seconds >= 120 else f"{seconds:g} s"


def claim_bound(claim: Mapping[str, Any] | None) -> bool:
    return ((claim or {}).get("status") or {}).get("phase") == "Bound"


# A Pending claim's events that are no fault: a WaitForFirstConsumer class waits for the
# server pod, which is itself waited for and said elsewhere.
_CLAIM_NORMAL = frozenset({"WaitForFirstConsumer", "WaitForPodScheduled"})


def claim_says(events: Sequence[Mapping[str, Any]]) -> str | None:
    """The newest event of a Pending claim that says why it is not bound (the PV
    controller's ExternalProvisioning, a provisioner's ProvisioningFailed), cleaned of
    what repeats change; None when there is none, or it only waits for its pod."""
    found = _newest(events, skip=_CLAIM_NORMAL)
    return found[1] if found and found[1] else None


def _newest(events: Sequence[Mapping[str, Any]], skip: frozenset[str] = frozenset()
            ) -> tuple[Mapping[str, Any], str] | None:
    """The newest of `events` (but those whose reason is in `skip`) and its message on
    one line, without the recorder's fold, cut to REFUSAL_CHARS; None when there is none."""
    newest = refusals.latest(e for e in events if str(e.get("reason")) not in skip)
    if newest is None:
        return None
    said = " ".join(str(newest.get("message") or "").split())
    return newest, said.removeprefix("(combined from similar events): ")[:REFUSAL_CHARS]


def rollout_stuck(deployment: Mapping[str, Any]) -> str | None:
    """A Deployment whose rollout has not progressed within its deadline (Progressing
    False, ProgressDeadlineExceeded), or None. Its old pods may still serve, so nothing
    else shows that the storage's change is not in place: a new squid image that cannot
    be pulled, a pool with no room for the new pods."""
    c = conditions.find((deployment.get("status") or {}).get("conditions"), "Progressing")
    if (c is None or c.get("status") != "False"
            or c.get("reason") != "ProgressDeadlineExceeded"):
        return None
    name = (deployment.get("metadata") or {}).get("name", "")
    return (f"Deployment {name}'s rollout is stuck, its old pods still serving: "
            f"{c.get('message', '')}")
