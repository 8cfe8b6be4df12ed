"""Every Kubernetes API call the operator makes: one table, the source of its RBAC.

Rows are (apiGroup, resource, verb, scope) with who makes the call and when. The
operator chart (charts/nightshift) grants exactly these rows, no more and no fewer;
tests/unit/test_chart_rbac.py renders the chart and compares. A new call through
kube.py (or a new kopf handler) is added here first, then to the chart.

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


@dataclass(frozen=True)
class Call:
    group: str
    resource: str  # plural, with "/subresource" where there is one
    verb: str
    scope: str
    caller: str  # who calls, and why
    when: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.group, self.resource, self.verb, self.scope)


def _rows(group: str, resource: str, verbs: str, scope: str, caller: str,
          when: Iterable[str] = ()) -> list[Call]:
    return [Call(group, resource, v, scope, caller, frozenset(when)) for v in verbs.split()]


_SSA = "server-side apply: patch, and create when the object is new"

CALLS: tuple[Call, ...] = tuple([
    # -- kopf itself --------------------------------------------------------------
    *_rows(CRD_GROUP, "customresourcedefinitions", "list watch", CLUSTER,
           "kopf's resource observer: serves a kind (Karpenter's NodeClaim) installed "
           "after the operator started"),
    *_rows(CORE, "namespaces", "list watch", CLUSTER,
           "kopf's namespace observer, only when watching listed namespaces",
           [LISTED_NAMESPACES]),
    *_rows(KOPF, "clusterkopfpeerings", "list watch patch", CLUSTER,
           "kopf peering of an all-namespaces operator: reads peers, writes keep-alives",
           [PEERING, ALL_NAMESPACES]),
    *_rows(KOPF, "kopfpeerings", "list watch patch", NAMESPACE,
           "kopf peering of a listed-namespaces operator, one object per namespace",
           [PEERING, LISTED_NAMESPACES]),
    # -- PipelineRuns (pipelinerun/) -------------------------------------------------
    *_rows(names.GROUP, names.PIPELINERUNS, "list watch", NAMESPACE,
           "kopf watch (pipelinerun/handlers.py); virtualcluster/observe.running_runs"),
    *_rows(names.GROUP, names.PIPELINERUNS, "get", NAMESPACE,
           "pipelinerun/reconcile.reconcile re-reads the run each pass; engine/status "
           "reads it to report a failed pass"),
    *_rows(names.GROUP, f"{names.PIPELINERUNS}/status", "patch", NAMESPACE,
           "pipelinerun/reconcile and engine/status write status (Kube.patch_status)"),
    *_rows(BATCH, "jobs", "list watch", NAMESPACE,
           "kopf watch of runs' Jobs (wake-ups); pipelinerun/reconcile lists a run's Jobs"),
    *_rows(BATCH, "jobs", "create patch", NAMESPACE,
           f"pipelinerun/reconcile: a stage's Indexed Job ({_SSA}); merge patches of "
           "parallelism and suspend"),
    *_rows(CORE, "configmaps", "list", NAMESPACE,
           "pipelinerun/itemsource.frozen_items: metadata of a run's item ConfigMaps"),
    *_rows(CORE, "configmaps", "get", NAMESPACE,
           "pipelinerun/itemsource.resolve: forEach.fromConfigMap"),
    *_rows(CORE, "configmaps", "create patch", NAMESPACE,
           f"pipelinerun/itemsource and plan: item and rerun-index ConfigMaps ({_SSA})"),
    *_rows(CORE, "pods", "list", NAMESPACE,
           "pipelinerun/reconcile failure samples (failed pods of one Job, limit 5); "
           "virtualcluster/observe.pending_cpu (unscheduled pipeline pods)"),
    *_rows(CORE, "events", "create", NAMESPACE,
           "Kube.event: a run's and a VirtualCluster's transitions"),
    *_rows(CORE, "secrets", "get", NAMESPACE,
           "pipelinerun/itemsource.s3_target: storage.s3.credentialsSecret of a "
           "forEach.fromS3 listing", [READ_SECRETS]),
    # -- VirtualClusters (virtualcluster/) -------------------------------------------
    *_rows(names.GROUP, names.VIRTUALCLUSTERS, "list watch", NAMESPACE,
           "kopf watch (virtualcluster/handlers.py: one engine loop per object); "
           "virtualcluster/observe re-reads the object each pass"),
    *_rows(names.GROUP, names.VIRTUALCLUSTERS, "get", NAMESPACE,
           "virtualcluster/observe re-reads the object each pass; engine/status reads "
           "it to report a failed pass"),
    *_rows(names.GROUP, names.VIRTUALCLUSTERS, "patch", NAMESPACE,
           "virtualcluster/reconcile._set_finalizer adds and removes "
           "nightshift.io/virtual-cluster"),
    *_rows(names.GROUP, f"{names.VIRTUALCLUSTERS}/status", "patch", NAMESPACE,
           "virtualcluster/reconcile and engine/status write status (Kube.patch_status)"),
    *_rows(CRD_GROUP, "customresourcedefinitions", "get", CLUSTER,
           "virtualcluster/observe.installed_crds: which Karpenter provider is installed"),
    *_rows(CORE, "nodes", "list watch", CLUSTER,
           "kopf watch of pool nodes (wake-ups); virtualcluster/observe.nodes"),
    *_rows(KARPENTER, "nodepools", "list", CLUSTER,
           "virtualcluster/observe.owned: a VirtualCluster's NodePools"),
    *_rows(KARPENTER, "nodepools", "create patch delete", CLUSTER,
           f"virtualcluster/reconcile: its NodePools ({_SSA}), pruned and finalized"),
    *_rows(KARPENTER, "nodeclaims", "list watch", CLUSTER,
           "kopf watch (wake-ups); virtualcluster/observe.nodeclaims (launching nodes)"),
    *_rows(KARPENTER_AWS, "ec2nodeclasses", "list create patch delete", CLUSTER,
           f"virtualcluster/reconcile: EC2NodeClasses on EKS ({_SSA}), pruned, finalized"),
    *_rows(KARPENTER_KWOK, "kwoknodeclasses", "list create patch delete", CLUSTER,
           f"virtualcluster/reconcile: KWOKNodeClasses locally ({_SSA}), pruned, finalized"),
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
