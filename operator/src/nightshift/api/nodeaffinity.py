"""Which nodes are a VirtualCluster's: the node-affinity rule that stage pods
(pipelinerun/jobs.placement) and SharedStorage workloads (sharedstorage/objects) share.
Pure."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.api import names


def taint_toleration(taint: Mapping[str, Any]) -> dict[str, Any]:
    """Tolerates a taint a VirtualCluster pool adds to its nodes besides the pool taint
    (spec.pools[].taints): it keeps other pods off the pool, not the stages and storages
    that name it, whose pods would otherwise never find a node there."""
    tol = {"key": str(taint["key"]), "operator": "Equal" if taint.get("value") else "Exists",
           "effect": str(taint.get("effect") or "NoSchedule")}
    if taint.get("value"):
        tol["value"] = str(taint["value"])
    return tol


def virtual_cluster_affinity(vc: str, namespace: str, *, hand_labeled: bool,
                             also: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Only VirtualCluster `vc`'s nodes, or (`hand_labeled`) hand-labeled ones; every
    term also requires the expressions `also` (a storage's pools).

    Pool names are per namespace but NodePools and nodes are cluster-scoped: without
    this, a `workers` pod could land on another collaboration's `workers` nodes.
    Static-mode nodes carry only the pool label, hence the second (OR'ed) term, which
    a VirtualCluster whose nodes Karpenter makes leaves out: there it would admit
    another collaboration's hand-labeled nodes of the same pool name, and Karpenter,
    which tries a pod's terms in turn, would report only that term's mismatch when no
    node of the pool can hold the pod (pipelinerun/unlaunched.py), not the pool's own
    reason.
    """
    terms: list[dict[str, Any]] = [{"matchExpressions": [
        *copy.deepcopy(list(also)),
        {"key": names.LABEL_VIRTUAL_CLUSTER, "operator": "In", "values": [vc]},
        {"key": names.LABEL_VIRTUAL_CLUSTER_NAMESPACE, "operator": "In", "values": [namespace]},
    ]}]
    if hand_labeled:
        terms.append({"matchExpressions": [
            *copy.deepcopy(list(also)),
            {"key": names.LABEL_VIRTUAL_CLUSTER, "operator": "DoesNotExist"}]})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
