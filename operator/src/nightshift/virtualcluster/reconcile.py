"""VirtualCluster reconcile pass: read → provider → validate → placement groups → render
→ apply → prune → observe → status, written once and only when it changed.

Deletion runs through the same pass. Our finalizer (nightshift.io/virtual-cluster)
keeps the object while PipelineRuns that name it still run, unless it is annotated
nightshift.io/force-delete: "true"; then the NodePools go, then (once their nodes are
gone) the node classes and EC2 placement groups, and last the finalizer.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from nightshift.api import conditions, names
from nightshift.aws import AwsError
from nightshift.aws.placement import delete_placement_group, ensure_placement_group
from nightshift.kube import Kube, KubeError
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster import observe
from nightshift.virtualcluster.catalog import InstanceCatalog
from nightshift.virtualcluster.nodeclasses import ownership_tags
from nightshift.virtualcluster.nodepools import render_virtualcluster
from nightshift.virtualcluster.provider import ProviderChoice, detect_provider
from nightshift.virtualcluster.spec import VirtualClusterSpec
from nightshift.virtualcluster.status import usage_by_nodepool, virtualcluster_status
from nightshift.virtualcluster.validate import validate

log = logging.getLogger("nightshift")

# TODO(lead): move to api.names beside the other annotations.
ANNOTATION_FORCE_DELETE = f"{names.GROUP}/force-delete"
# The condition a VirtualCluster being deleted carries: what it still waits for.
DELETING = "Deleting"

# How soon to look again when something is moving (nodes launching, pods pending,
# an AWS error to retry); otherwise the daemon's resync applies.
BUSY_REQUEUE = 5.0
ERROR_REQUEUE = 30.0


@dataclass(frozen=True)
class Outcome:
    requeue_after: float | None = None
    gone: bool = False


@dataclass
class LoopState:
    """What one VirtualCluster's loop remembers between passes (lost on restart,
    harmlessly: the next pass applies everything once and re-reads the rest)."""

    applied: dict[str, str] = field(default_factory=dict)
    static_pools: tuple[str, ...] = ()


def reconcile(kube: Kube, namespace: str, name: str, clouds: observe.Clouds,
              state: LoopState) -> Outcome:
    vc = kube.get(names.API_VERSION, names.VIRTUALCLUSTER, name, namespace)
    if vc is None:
        return Outcome(gone=True)
    meta = vc["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    deleting = bool(meta.get("deletionTimestamp"))
    if deleting and names.FINALIZER_VIRTUAL_CLUSTER not in finalizers:
        return Outcome(gone=True)
    if not deleting and names.FINALIZER_VIRTUAL_CLUSTER not in finalizers:
        # Before anything cluster-scoped exists: nothing may outlive the object.
        vc = kube.merge_patch(names.API_VERSION, names.VIRTUALCLUSTER, name, namespace, {
            "metadata": {"finalizers": [*finalizers, names.FINALIZER_VIRTUAL_CLUSTER],
                         "resourceVersion": meta.get("resourceVersion")}})
    crds = clouds.installed_crds(kube)
    blockers: list[str] = []
    if deleting:
        blockers = observe.running_runs(kube, namespace, name)
        forced = (meta.get("annotations") or {}).get(ANNOTATION_FORCE_DELETE) == "true"
        if not blockers or forced:
            return _finalize(kube, vc, crds, clouds)
    try:
        spec = VirtualClusterSpec.model_validate(vc.get("spec") or {})
    except ValidationError as e:
        # Only when the CRD in the cluster is older or newer than this operator.
        _write_status(kube, vc, _unreadable_status(vc, e))
        return Outcome(requeue_after=ERROR_REQUEUE)
    choice = detect_provider(crds, spec.provider)
    catalog = clouds.catalog() if choice.provider == "kwok" else None
    problems = validate(spec, choice.provider, catalog)
    not_ready: list[str] = []
    claims: list[dict[str, Any]] = []
    requeue: float | None = None
    if not problems and not choice.error:
        if choice.provider == "aws":
            not_ready += ensure_placement_groups(clouds.ec2, vc, spec)
        claims = observe.nodeclaims(kube, crds, namespace, name)
        if not not_ready:
            not_ready += _apply_and_prune(kube, vc, choice, crds, catalog, claims, state)
        owned = observe.owned(kube, crds, namespace, name,
                              [observe.NODEPOOL, *observe.NODECLASSES])
        not_ready += observe.not_ready(owned)
    static = tuple(p.name for p in spec.pools) if choice.mode == "static" else ()
    state.static_pools = static
    node_list = observe.nodes(kube, namespace, name, static)
    pending = observe.pending_cpu(kube, namespace, [p.name for p in spec.pools])
    status = virtualcluster_status(
        vc, choice=choice, nodes=node_list, nodeclaims=claims, pending_cpu=pending,
        price=clouds.prices(choice.provider), problems=problems, not_ready=not_ready)
    if deleting:
        status["conditions"] = _with_deleting(vc, status["conditions"],
                                              _blocked(namespace, name, blockers))
    _write_status(kube, vc, status)
    if not_ready:
        requeue = ERROR_REQUEUE
    if any(p.get("launching") or p.get("pendingCPU") for p in status["pools"]):
        requeue = BUSY_REQUEUE
    return Outcome(requeue_after=requeue)


def _apply_and_prune(kube: Kube, vc: Mapping[str, Any], choice: ProviderChoice,
                     crds: frozenset[str], catalog: InstanceCatalog | None,
                     claims: list[dict[str, Any]], state: LoopState) -> list[str]:
    """Apply what changed since this loop last applied it, delete what is ours but no
    longer rendered. Returns the API's refusals, each naming the object."""
    namespace, name = vc["metadata"]["namespace"], vc["metadata"]["name"]
    rendered = render_virtualcluster(vc, choice.provider, catalog=catalog,
                                     usage=usage_by_nodepool(claims))
    existing = observe.owned(kube, crds, namespace, name,
                             [observe.NODEPOOL, *observe.NODECLASSES])
    present = {(o["kind"], o["metadata"]["name"]) for o in existing}
    errors: list[str] = []
    for manifest in rendered:
        key = f"{manifest['kind']}/{manifest['metadata']['name']}"
        text = json.dumps(manifest, sort_keys=True)
        if state.applied.get(key) == text and (manifest["kind"],
                                               manifest["metadata"]["name"]) in present:
            continue
        try:
            kube.apply(manifest)
            state.applied[key] = text
        except KubeError as e:
            if e.status in (409, 429) or e.status >= 500:
                raise  # transient: the daemon retries the pass
            state.applied.pop(key, None)
            errors.append(f"{key} was refused by the API server ({e.message}): this is "
                          "a nightshift bug or a Karpenter version mismatch; report it")
    if errors:
        return errors  # do not prune while the new set is not fully in place
    wanted = {(m["kind"], m["metadata"]["name"]) for m in rendered}
    # NodePools before node classes: a class in use by a NodePool cannot go first.
    for obj in sorted(existing, key=lambda o: o["kind"] != "NodePool"):
        if (obj["kind"], obj["metadata"]["name"]) not in wanted:
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
            state.applied.pop(f"{obj['kind']}/{obj['metadata']['name']}", None)
    return []


def placement_pools(spec: VirtualClusterSpec) -> list[str]:
    return [p.name for p in spec.pools if p.placement == "cluster"]


def ensure_placement_groups(ec2: Callable[[], Any], vc: Mapping[str, Any],
                            spec: VirtualClusterSpec) -> list[str]:
    """Create (or accept as ours) each cluster pool's placement group before its
    EC2NodeClass names it. AWS errors come back as not-ready messages."""
    pools = placement_pools(spec)
    if not pools:
        return []
    meta = vc["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], str(meta.get("uid", ""))
    out = []
    try:
        client = ec2()
    except Exception as e:  # no region or credentials
        return [_aws_message("CreatePlacementGroup", "NoClient", str(e))]
    for pool in pools:
        group = vcnames.placement_group_name(namespace, name, pool)
        try:
            ensure_placement_group(client, group, uid, ownership_tags(namespace, name, pool))
        except AwsError as e:
            out.append(f"pool {pool}: placement group {group}: "
                       + _aws_message(e.operation, e.code, e.message))
    return out


def delete_placement_groups(ec2: Callable[[], Any], vc: Mapping[str, Any],
                            spec: VirtualClusterSpec) -> list[str]:
    """Delete our placement groups (call only once the pools' nodes are gone)."""
    pools = placement_pools(spec)
    if not pools:
        return []
    meta = vc["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], str(meta.get("uid", ""))
    try:
        client = ec2()
    except Exception as e:
        return [_aws_message("DeletePlacementGroup", "NoClient", str(e))]
    out = []
    for pool in pools:
        group = vcnames.placement_group_name(namespace, name, pool)
        try:
            delete_placement_group(client, group, uid)
        except AwsError as e:
            out.append(f"pool {pool}: placement group {group}: "
                       + _aws_message(e.operation, e.code, e.message))
    return out


def _aws_message(operation: str, code: str, message: str) -> str:
    hint = ""
    if code in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
        hint = (": give the operator's IAM role ec2:CreatePlacementGroup, "
                "ec2:DescribePlacementGroups, ec2:DeletePlacementGroup and ec2:CreateTags")
    elif code == "NoClient":
        hint = ": set AWS_REGION and the operator's AWS credentials (IRSA or Pod Identity)"
    return f"AWS {operation} failed: {code}: {message}{hint}"


def _finalize(kube: Kube, vc: dict[str, Any], crds: frozenset[str],
              clouds: observe.Clouds) -> Outcome:
    """One deletion step; the finalizer goes only once nothing of ours is left."""
    meta = vc["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    nodepools = observe.owned(kube, crds, namespace, name, [observe.NODEPOOL])
    for np in nodepools:
        kube.delete(np["apiVersion"], np["kind"], np["metadata"]["name"])
    claims = observe.nodeclaims(kube, crds, namespace, name)
    node_list = observe.nodes(kube, namespace, name)
    if claims or node_list:
        return _deleting(kube, vc, "RemovingNodes", f"waiting for {len(node_list)} node(s) "
                         f"and {len(claims)} NodeClaim(s) of this VirtualCluster to go; "
                         "nodes running pods with karpenter.sh/do-not-disrupt wait for them")
    classes = observe.owned(kube, crds, namespace, name, list(observe.NODECLASSES))
    for nc in classes:
        kube.delete(nc["apiVersion"], nc["kind"], nc["metadata"]["name"])
    if classes:
        return _deleting(kube, vc, "RemovingNodeClasses",
                         f"waiting for {len(classes)} node class(es) to go")
    try:
        spec: VirtualClusterSpec | None = VirtualClusterSpec.model_validate(vc.get("spec") or {})
    except ValidationError:
        spec = None
    if spec is not None and observe.CRD_EC2NODECLASS in crds and placement_pools(spec):
        errors = delete_placement_groups(clouds.ec2, vc, spec)
        if errors:
            _deleting(kube, vc, "PlacementGroupError", "; ".join(errors))
            return Outcome(requeue_after=ERROR_REQUEUE)
    kube.merge_patch(names.API_VERSION, names.VIRTUALCLUSTER, name, namespace, {
        "metadata": {"finalizers": [f for f in meta.get("finalizers") or []
                                    if f != names.FINALIZER_VIRTUAL_CLUSTER],
                     "resourceVersion": meta.get("resourceVersion")}})
    log.info("VirtualCluster %s/%s: cleaned up, finalizer removed", namespace, name)
    return Outcome(gone=True)


def _blocked(namespace: str, name: str, blockers: Sequence[str]) -> tuple[str, str]:
    shown = ", ".join(blockers[:10]) + (f" and {len(blockers) - 10} more"
                                        if len(blockers) > 10 else "")
    return ("InUse", f"kept while PipelineRun(s) {shown} use this VirtualCluster; it is "
            f"deleted when they end. To delete it now (their pending tasks then find no "
            f"nodes): kubectl annotate virtualcluster -n {namespace} {name} "
            f"{ANNOTATION_FORCE_DELETE}=true")


def _with_deleting(vc: Mapping[str, Any], conds: list[dict[str, Any]],
                   why: tuple[str, str]) -> list[dict[str, Any]]:
    gen = int(vc["metadata"].get("generation", 0))
    old = (vc.get("status") or {}).get("conditions")
    mine = conditions.merge(old, [conditions.condition(DELETING, conditions.TRUE, why[0],
                                                       why[1], gen)])
    return [*[c for c in conds if c["type"] != DELETING], *mine]


def _deleting(kube: Kube, vc: dict[str, Any], reason: str, message: str) -> Outcome:
    status = dict(vc.get("status") or {})
    status["conditions"] = _with_deleting(vc, list(status.get("conditions") or []),
                                          (reason, message))
    _write_status(kube, vc, status)
    return Outcome(requeue_after=BUSY_REQUEUE)


def _unreadable_status(vc: Mapping[str, Any], e: ValidationError) -> dict[str, Any]:
    gen = int(vc["metadata"].get("generation", 0))
    first = e.errors()[0]
    path = "spec." + ".".join(str(p) for p in first.get("loc", ()))
    msg = f"{path}: {first.get('msg')}: the CRD and the operator disagree; upgrade both"
    new = [conditions.condition(conditions.INVALID, conditions.TRUE, "InvalidSpec", msg, gen),
           conditions.condition(conditions.READY, conditions.FALSE, "Invalid", msg, gen)]
    old = (vc.get("status") or {}).get("conditions")
    return {**(vc.get("status") or {}), "observedGeneration": gen,
            "conditions": conditions.merge(old, new)}


def _write_status(kube: Kube, vc: Mapping[str, Any], new: dict[str, Any]) -> None:
    """Patch status only when it changed; post events for condition transitions."""
    old = vc.get("status") or {}
    if new == old:
        return
    meta = vc["metadata"]
    kube.patch_status(names.API_VERSION, names.VIRTUALCLUSTER, meta["name"],
                      meta["namespace"], new, resource_version=meta.get("resourceVersion"))
    for type_, status, reason, message in _transitions(old.get("conditions"),
                                                       new.get("conditions")):
        warning = (type_ == conditions.READY and status == conditions.FALSE) or (
            type_ in (conditions.INVALID, conditions.CAPACITY_LIMITED)
            and status == conditions.TRUE)
        # An event lost is not worth failing the pass for.
        with contextlib.suppress(KubeError):
            kube.event(vc, "Warning" if warning else "Normal", reason,
                       f"{type_}={status}: {message}" if message else f"{type_}={status}")


def _transitions(old: Sequence[Mapping[str, Any]] | None,
                 new: Sequence[Mapping[str, Any]] | None) -> list[tuple[str, str, str, str]]:
    out = []
    for c in new or []:
        prior = conditions.find(old, c["type"])
        unchanged = prior is not None and prior.get("status") == c["status"]
        # A fresh object's "all is well" False conditions are not news.
        quiet = prior is None and c["status"] == conditions.FALSE and c["type"] in (
            conditions.INVALID, conditions.CAPACITY_LIMITED)
        if not unchanged and not quiet:
            out.append((str(c["type"]), str(c["status"]), str(c.get("reason", "")),
                        str(c.get("message", ""))))
    return out


