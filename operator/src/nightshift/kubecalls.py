"""Every Kubernetes API call the operator makes: one table, the source of its RBAC.

Rows are (apiGroup, resource, verb, scope), with who makes the call (our code through
kube.py, or kopf), why, and when. The operator chart (charts/nightshift) grants exactly
these rows, no more and no fewer: tests/unit/test_chart_rbac.py renders the chart and
compares. The kube.py rows are exactly what reconcile passes call:
tests/unit/test_chart_kubecalls.py runs them against a recording API server. A new
call (or a new kopf handler) is added here first, then to the chart.

Verbs follow the API server's authorization, not the client method: a server-side
apply is authorized as `patch`, and additionally as `create` when the object does not
exist yet; a LIST with a label selector is still `list`; kopf's watches are a `list`
then a `watch`. API discovery (GET /api, /apis/...) needs no rule: every
authenticated user may read it (system:discovery).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nightshift.api import names

# Scopes. CLUSTER: a cluster-scoped resource (the chart's ClusterRole). NAMESPACE: a
# namespaced resource in every namespace the operator watches (a ClusterRole bound
# cluster-wide when it watches all namespaces, else a Role in each watched namespace).
CLUSTER = "cluster"
NAMESPACE = "namespace"

# Conditions under which a row applies (all of a row's conditions must hold).
ALL_NAMESPACES = "all-namespaces"        # the operator watches every namespace
LISTED_NAMESPACES = "listed-namespaces"  # ... or only some (`--namespace`)
PEERING = "peering"                      # kopf peering (two replicas, one active)
READ_SECRETS = "read-secrets"            # the chart's rbac.readSecrets

CONDITIONS = frozenset({ALL_NAMESPACES, LISTED_NAMESPACES, PEERING, READ_SECRETS})

CORE = ""
BATCH = "batch"
CRD_GROUP = "apiextensions.k8s.io"
KARPENTER = "karpenter.sh"
KARPENTER_AWS = "karpenter.k8s.aws"
KARPENTER_KWOK = "karpenter.kwok.sh"
KOPF = "kopf.dev"
APPS = "apps"
AUTOSCALING = "autoscaling"
STORAGE = "storage.k8s.io"


# Who makes a call: our code through kube.py, or kopf (its watches, observers, peering).
KUBE = "kube.py"
KOPF_FRAMEWORK = "kopf"


@dataclass(frozen=True)
class Call:
    group: str
    resource: str  # plural, with "/subresource" where there is one
    verb: str
    scope: str
    via: frozenset[str]  # KUBE and/or KOPF_FRAMEWORK
    caller: str  # who calls, and why
    when: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.group, self.resource, self.verb, self.scope)


def _rows(group: str, resource: str, verbs: str, scope: str, via: str, caller: str,
          when: Iterable[str] = ()) -> list[Call]:
    return [Call(group, resource, v, scope, frozenset(via.split("+")), caller,
                 frozenset(when)) for v in verbs.split()]


_SSA = "server-side apply: patch, and create when the object is new"
_K, _F, _KF = KUBE, KOPF_FRAMEWORK, f"{KUBE}+{KOPF_FRAMEWORK}"

CALLS: tuple[Call, ...] = tuple([
    # -- kopf itself --------------------------------------------------------------
    *_rows(CRD_GROUP, "customresourcedefinitions", "list watch", CLUSTER, _F,
           "kopf's resource observer: serves a kind (Karpenter's NodeClaim) installed "
           "after the operator started"),
    *_rows(CORE, "namespaces", "list watch", CLUSTER, _F,
           "kopf's namespace observer, only when watching listed namespaces",
           [LISTED_NAMESPACES]),
    *_rows(KOPF, "clusterkopfpeerings", "list watch patch", CLUSTER, _F,
           "kopf peering of an all-namespaces operator: reads peers, writes keep-alives",
           [PEERING, ALL_NAMESPACES]),
    *_rows(KOPF, "kopfpeerings", "list watch patch", NAMESPACE, _F,
           "kopf peering of a listed-namespaces operator, one object per namespace",
           [PEERING, LISTED_NAMESPACES]),
    # -- PipelineRuns (pipelinerun/) -------------------------------------------------
    *_rows(names.GROUP, names.PIPELINERUNS, "list", NAMESPACE, _KF,
           "kopf's watch (pipelinerun/handlers.py); virtualcluster/ and sharedstorage/"
           "observe: the runs that still use a VirtualCluster or SharedStorage being "
           "deleted"),
    *_rows(names.GROUP, names.PIPELINERUNS, "watch", NAMESPACE, _F,
           "kopf's watch: one engine loop per run"),
    *_rows(names.GROUP, names.PIPELINERUNS, "get", NAMESPACE, _K,
           "pipelinerun/reconcile.reconcile re-reads the run each pass; engine/status "
           "reads it to report a failed pass"),
    *_rows(names.GROUP, f"{names.PIPELINERUNS}/status", "patch", NAMESPACE, _K,
           "pipelinerun/reconcile and engine/status write status (Kube.patch_status)"),
    *_rows(BATCH, "jobs", "list", NAMESPACE, _KF,
           "pipelinerun/reconcile lists a run's Jobs; kopf's watch of them"),
    *_rows(BATCH, "jobs", "watch", NAMESPACE, _F,
           "kopf's watch of runs' Jobs: their events wake the run's loop"),
    *_rows(BATCH, "jobs", "create patch", NAMESPACE, _K,
           f"pipelinerun/reconcile: a stage's Indexed Job ({_SSA}); merge patches of "
           "parallelism and suspend; sharedstorage/reconcile: a Gluster volume Job"),
    *_rows("kubeflow.org", "mpijobs", "list", NAMESPACE, _K,
           "pipelinerun/reconcile lists the MPIJobs of a run with mpi stages"),
    *_rows("kubeflow.org", "mpijobs", "create patch", NAMESPACE, _K,
           f"pipelinerun/reconcile: an mpi stage's MPIJob ({_SSA}); merge patches of "
           "runPolicy.suspend"),
    *_rows(CORE, "configmaps", "list", NAMESPACE, _K,
           "pipelinerun/itemsource.frozen_items: metadata of a run's item ConfigMaps; "
           "sharedstorage/observe: a storage's own, by label"),
    *_rows(CORE, "serviceaccounts", "get", NAMESPACE, _K,
           "pipelinerun/reconcile: the ServiceAccounts the stages name exist "
           "(pipelinerun/references.py)"),
    *_rows(CORE, "persistentvolumeclaims", "get", NAMESPACE, _K,
           "pipelinerun/reconcile: the claims of a run's pvc storages exist "
           "(pipelinerun/references.py)"),
    *_rows(CORE, "configmaps", "get", NAMESPACE, _K,
           "pipelinerun/itemsource.resolve: forEach.fromConfigMap; pipelinerun/reconcile: "
           "the keys of each ConfigMap an env configMapKeyRef names "
           "(pipelinerun/references.py); pipelinerun/observe: a stage's done set (doneset.py) "
           "and a retry Job's indexes ConfigMaps kept as its map, once per loop"),
    *_rows(CORE, "configmaps", "create patch", NAMESPACE, _K,
           f"pipelinerun/itemsource and plan: item and rerun-index ConfigMaps ({_SSA}); "
           "reconcile: a stage's done set where succeededItems is cut (doneset.py)"),
    *_rows(CORE, "pods", "list", NAMESPACE, _K,
           "pipelinerun/observe failure samples (failed pods of one Job, limit 5), "
           "a running Job's Failed pods for evictions (limit 20, every 60 s), "
           "a stalled Job's Pending pods (limit 3), an MPI stage's Running workers while "
           "its launcher is not made (limit its workers, at most 100) and a lost Job's "
           "live pods (limit 1); "
           "virtualcluster/observe pending CPU (unscheduled pipeline pods); "
           "sharedstorage/observe: a not-Ready storage's Pending pods (limit 3) and Running "
           "ones (limit 20, for crash loops)"),
    *_rows(CORE, "events", "list", NAMESPACE, _K,
           "pipelinerun/observe: a stalled stage's first Pending pod without a sandbox, its "
           "events (by uid, limit 100: FailedMount, unmounted.py), or, while others run, "
           "of one held 30 s without it; on a VirtualCluster, "
           "its first unschedulable Pending pod's events (by uid, limit 100: Karpenter's "
           "FailedScheduling and Nominated, unlaunched.py); a stage Job's "
           "FailedCreate events (field selector on its "
           "uid, limit 100), only while the Job has had no pod, or fewer running than it "
           "may, for 30 s; an MPI stage's MPIJobFailed events while its workers are not "
           "running and none is Pending, or its launcher is not made; its launcher Job's "
           "FailedCreate events (by name) while its launcher pod is not running "
           "(stalled.py); sharedstorage/observe: a not-Ready storage's StatefulSet, "
           "DaemonSet or Job short of pods, its FailedCreate events, and a Pending claim's "
           "events (by uid, limit 100)"),
    *_rows(CORE, "events", "create", NAMESPACE, _K,
           "Kube.event (engine/passes.post_events): a run's, a VirtualCluster's and a "
           "SharedStorage's transitions"),
    *_rows(CORE, "secrets", "get", NAMESPACE, _K,
           "pipelinerun/itemsource.s3_target: storage.s3.credentialsSecret of a "
           "forEach.fromS3 listing or forEach.fromFile read; pipelinerun/reconcile: the key "
           "names of each Secret the pods reference (pipelinerun/references.py; refused: "
           "not checked)",
           [READ_SECRETS]),
    # -- VirtualClusters (virtualcluster/) -------------------------------------------
    *_rows(names.GROUP, names.VIRTUALCLUSTERS, "list", NAMESPACE, _KF,
           "kopf's watch (virtualcluster/handlers.py): one engine loop per object; "
           "sharedstorage/observe: the pools of the VirtualCluster a storage names"),
    *_rows(names.GROUP, names.VIRTUALCLUSTERS, "watch", NAMESPACE, _F,
           "kopf's watch (virtualcluster/handlers.py): one engine loop per object"),
    *_rows(names.GROUP, names.VIRTUALCLUSTERS, "get", NAMESPACE, _K,
           "virtualcluster/observe re-reads the object each pass; engine/status reads "
           "it to report a failed pass"),
    *_rows(names.GROUP, names.VIRTUALCLUSTERS, "patch", NAMESPACE, _K,
           "engine/passes.finish_pass adds and removes "
           "nightshift.io/virtual-cluster"),
    *_rows(names.GROUP, f"{names.VIRTUALCLUSTERS}/status", "patch", NAMESPACE, _K,
           "virtualcluster/reconcile and engine/status write status (Kube.patch_status)"),
    *_rows(CRD_GROUP, "customresourcedefinitions", "get", CLUSTER, _K,
           "virtualcluster/observe: which Karpenter CRDs (so which provider) are "
           "installed; sharedstorage/observe: EC2NodeClass's says EKS (NLB annotations)"),
    *_rows(CORE, "nodes", "list", CLUSTER, _KF,
           "virtualcluster/observe: a VirtualCluster's nodes; kopf's watch of pool nodes"),
    *_rows(CORE, "nodes", "get", CLUSTER, _K,
           "sharedstorage/observe: whether each node holding a storage's data still "
           "exists (reclaimPolicy Delete: deleting)"),
    *_rows(CORE, "nodes", "watch", CLUSTER, _F,
           "kopf's watch of pool nodes: their events wake the VirtualCluster's loop"),
    *_rows(KARPENTER, "nodepools", "list", CLUSTER, _KF,
           "virtualcluster/observe: a VirtualCluster's NodePools, by label; kopf's watch"),
    *_rows(KARPENTER, "nodepools", "watch", CLUSTER, _F,
           "kopf's watch of our NodePools: a hand edit wakes the loop that restores it"),
    *_rows(KARPENTER, "nodepools", "create patch delete", CLUSTER, _K,
           f"virtualcluster/reconcile: its NodePools ({_SSA}), pruned and finalized"),
    *_rows(KARPENTER, "nodeclaims", "list", CLUSTER, _KF,
           "virtualcluster/observe: launching nodes; kopf's watch of them"),
    *_rows(KARPENTER, "nodeclaims", "watch", CLUSTER, _F,
           "kopf's watch of NodeClaims: their events wake the VirtualCluster's loop"),
    *_rows(KARPENTER_AWS, "ec2nodeclasses", "list create patch delete", CLUSTER, _K,
           f"virtualcluster/reconcile: EC2NodeClasses on EKS ({_SSA}), pruned, finalized"),
    *_rows(KARPENTER_KWOK, "kwoknodeclasses", "list create patch delete", CLUSTER, _K,
           f"virtualcluster/reconcile: KWOKNodeClasses locally ({_SSA}), pruned, finalized"),
    # -- SharedStorages (sharedstorage/) ---------------------------------------------
    *_rows(names.GROUP, names.SHAREDSTORAGES, "list watch", NAMESPACE, _F,
           "kopf's watch (sharedstorage/handlers.py): one engine loop per object"),
    *_rows(names.GROUP, names.SHAREDSTORAGES, "get", NAMESPACE, _K,
           "sharedstorage/observe re-reads the object each pass; engine/status reads it "
           "to report a failed pass; pipelinerun/reconcile: the SharedStorages a run "
           "names (spec.storage[].sharedStorage)"),
    *_rows(names.GROUP, names.SHAREDSTORAGES, "patch", NAMESPACE, _K,
           "engine/passes.finish_pass adds and removes "
           "nightshift.io/shared-storage"),
    *_rows(names.GROUP, f"{names.SHAREDSTORAGES}/status", "patch", NAMESPACE, _K,
           "sharedstorage/reconcile and engine/status write status (Kube.patch_status)"),
    *_rows(STORAGE, "storageclasses", "list", CLUSTER, _K,
           "sharedstorage/observe: an NFS backing claim's storageClass must exist"),
    *_rows(CORE, "services", "list create patch delete", NAMESPACE, _K,
           f"sharedstorage/reconcile: squid, NFS and Gluster Services ({_SSA}), pruned"),
    *_rows(CORE, "persistentvolumeclaims", "list create patch delete", NAMESPACE, _K,
           f"sharedstorage/reconcile: the NFS data and client claims ({_SSA}); the "
           "client claim deleted with its storage"),
    *_rows(CORE, "persistentvolumes", "list create patch delete", CLUSTER, _K,
           f"sharedstorage/reconcile: the NFS clients' PersistentVolume ({_SSA}), which "
           "cannot be owned by a namespaced object, deleted with its storage"),
    *_rows(CORE, "configmaps", "delete", NAMESPACE, _K,
           "sharedstorage/reconcile prunes a configuration no longer rendered; "
           "pipelinerun/itemsource drops the chunks an interrupted freeze left"),
    *_rows(CORE, "pods", "watch", NAMESPACE, _F,
           "kopf's watch of storage pods (label selector nightshift.io/storage): a "
           "server or squid ready wakes the storage's loop"),
    *_rows(BATCH, "jobs", "delete", NAMESPACE, _K,
           "sharedstorage/reconcile prunes a Gluster volume Job of a storage no longer "
           "of that shape"),
    *_rows(APPS, "deployments", "list", NAMESPACE, _KF,
           "sharedstorage/observe: squid and nfs-ganesha Deployments; kopf's watch"),
    *_rows(APPS, "daemonsets", "list", NAMESPACE, _KF,
           "sharedstorage/observe: CVMFS and Gluster client DaemonSets; kopf's watch"),
    *_rows(APPS, "statefulsets", "list", NAMESPACE, _KF,
           "sharedstorage/observe: Gluster server StatefulSets; kopf's watch"),
    *_rows(APPS, "deployments", "watch", NAMESPACE, _F,
           "kopf's watch (label selector nightshift.io/storage): wakes the storage"),
    *_rows(APPS, "daemonsets", "watch", NAMESPACE, _F,
           "kopf's watch (label selector nightshift.io/storage): wakes the storage"),
    *_rows(APPS, "statefulsets", "watch", NAMESPACE, _F,
           "kopf's watch (label selector nightshift.io/storage): wakes the storage"),
    *_rows(APPS, "deployments", "create patch delete", NAMESPACE, _K,
           f"sharedstorage/reconcile: squid and nfs-ganesha servers ({_SSA}), pruned"),
    *_rows(APPS, "daemonsets", "create patch delete", NAMESPACE, _K,
           f"sharedstorage/reconcile: CVMFS and Gluster clients ({_SSA}), pruned"),
    *_rows(APPS, "statefulsets", "create patch delete", NAMESPACE, _K,
           f"sharedstorage/reconcile: Gluster servers ({_SSA}), pruned"),
    *_rows(AUTOSCALING, "horizontalpodautoscalers", "list create patch delete", NAMESPACE,
           _K, f"sharedstorage/reconcile: the squids' autoscaler ({_SSA}), pruned when "
           "replicas.min equals max"),
])


def expected(*, all_namespaces: bool, peering: bool,
             read_secrets: bool) -> frozenset[tuple[str, str, str, str]]:
    """The (apiGroup, resource, verb, scope) rows the chart must grant for its values."""
    active = {ALL_NAMESPACES if all_namespaces else LISTED_NAMESPACES}
    if peering:
        active.add(PEERING)
    if read_secrets:
        active.add(READ_SECRETS)
    return frozenset(c.key for c in CALLS if c.when <= active)
