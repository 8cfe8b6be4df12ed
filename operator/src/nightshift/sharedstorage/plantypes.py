"""What the SharedStorage planner (plan.py) reads and returns, and the kinds each type
makes: the planner's inputs and outputs, apart from its decisions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nightshift.api import podstate
from nightshift.api.ownedplan import OwnedPlan
from nightshift.sharedstorage import gluster
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.objects import Platform
from nightshift.sharedstorage.validate import ClusterFacts

Obj = Mapping[str, Any]

# What each type makes, (apiVersion, kind): what observe lists (by the storage's label)
# and what may be pruned. The NFS clients' PersistentVolume is cluster-scoped.
NAMESPACED_KINDS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "nfs": (("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment"),
            ("v1", "PersistentVolumeClaim"), ("batch/v1", "Job")),
    "glusterfs": (("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "StatefulSet"),
                  ("apps/v1", "DaemonSet"), ("batch/v1", "Job"),
                  ("v1", "PersistentVolumeClaim")),
    "cvmfs": (("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment"),
              ("apps/v1", "DaemonSet"), ("autoscaling/v2", "HorizontalPodAutoscaler"),
              ("v1", "PersistentVolumeClaim")),
    "s3": (),
}
# The clients' PersistentVolume (nfs: the server's export; glusterfs, cvmfs: the node's
# mount), which pipeline pods reach through the claim `<name>-<role>-client`.
CLUSTER_KINDS: Mapping[str, tuple[tuple[str, str], ...]] = {
    t: (("v1", "PersistentVolume"),) for t in ("nfs", "glusterfs", "cvmfs")
}
CLIENT_ROLES = {"nfs": "nfs", "glusterfs": "gluster", "cvmfs": "cvmfs"}


@dataclass(frozen=True)
class Observed:
    storage: Obj
    # The VirtualClusters' pools, the StorageClasses, the cluster's address ranges.
    facts: ClusterFacts
    platform: Platform
    # Our objects as the API server holds them (NAMESPACED_KINDS and CLUSTER_KINDS of
    # the storage's type, by label).
    owned: Sequence[Obj]
    now: datetime
    # glusterfs: the server pods.
    server_pods: Sequence[gluster.ServerPod] = ()
    # cvmfs: each ready squid's rates since the last reading ([] when none answered).
    squid: Sequence[ssstatus.SquidSample] = ()
    # glusterfs, nfs on localDisk: the nodes of the server pods that exist now (data
    # nodes), and which of status.dataNodes still exist, and why those not Ready are
    # not (read when deleting).
    server_nodes: Sequence[str] = ()
    server_pods_left: int = 0
    existing_nodes: frozenset[str] = frozenset()
    unready_nodes: Mapping[str, str] = field(default_factory=dict)
    # PipelineRuns naming this storage that have not ended (read when deleting).
    running_runs: Sequence[str] = ()
    # What applying this plan's writes met, each a sentence naming the object: the
    # reconciler plans once more with them to write the status.
    errors: Sequence[str] = ()
    # Where the workloads' images come from (objects.with_images).
    image_registry: str = ""
    image_tag: str = ""
    # A few of its Pending pods that do not start by themselves (read while not Ready).
    pods_not_starting: Sequence[podstate.NotStarting] = ()
    # (kind, name, refusal) of its StatefulSets, DaemonSets and Jobs whose pods the API
    # server refuses, from their FailedCreate events (read while not Ready and short).
    pods_refused: Sequence[tuple[str, str, str]] = ()
    # Its Pending claims' newest events that say why (read while not Ready), by name.
    claims_waiting: Mapping[str, str] = field(default_factory=dict)
    # The events of its LoadBalancer Service while it has waited load_balancer_grace
    # seconds or more for an address.
    load_balancer_events: Sequence[Obj] = ()
    load_balancer_grace: float = 120.0
    # s3: what is wrong with spec.s3.credentialsSecret ("" when nothing, or unreadable
    # to the operator: the runs that use the storage then say so).
    secret_problem: str = ""


@dataclass(frozen=True)
class Plan(OwnedPlan):
    # The VirtualCluster whose first pass (status.mode) this storage waits for: its
    # events wake the storage (handlers.py).
    awaiting_virtual_cluster: str | None = None


def server_pod(pod: Obj) -> gluster.ServerPod:
    """A gluster server pod as the volume commands need it."""
    status = pod.get("status") or {}
    return gluster.ServerPod(name=str(pod["metadata"]["name"]), ip=str(status.get("podIP") or ""),
                             ready=podstate.ready(pod)
                             and not pod["metadata"].get("deletionTimestamp"),
                             node=str((pod.get("spec") or {}).get("nodeName") or ""))
