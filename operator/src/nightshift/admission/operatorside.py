"""What the operator says of an admitted object: its Invalid condition's problems.

The same calls the reconcilers make: the kind's spec model, then its validate module,
with what the operator would know of the cluster replaced by Facts (given on the
command line or found among the files validated together: VirtualClusters,
StorageClasses). A fact not known is not checked, as in the operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from nightshift.api.fieldpath import field_path
from nightshift.api.problems import Problem
from nightshift.pipelinerun import validate as prvalidate
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift.sharedstorage import validate as ssvalidate
from nightshift.sharedstorage.spec import SharedStorageSpec
from nightshift.virtualcluster import validate as vcvalidate
from nightshift.virtualcluster.catalog import InstanceCatalog
from nightshift.virtualcluster.spec import VirtualClusterSpec


@dataclass(frozen=True)
class Facts:
    # The provider a VirtualCluster with provider: auto gets (the operator detects it
    # from the cluster's CRDs: EC2NodeClass -> aws, KWOKNodeClass -> kwok).
    provider: str = "aws"
    # Known instance types and families (the KWOK provider's catalog file); None: not
    # checked.
    catalog: InstanceCatalog | None = None
    # namespace -> VirtualCluster name -> pool names; None: not known.
    virtual_clusters: Mapping[str, Mapping[str, Sequence[str]]] | None = None
    storage_classes: frozenset[str] | None = None
    default_storage_class: str | None = None
    cluster_cidrs: tuple[str, ...] = field(default=())


def _model_problems(e: ValidationError, suffix: str = "") -> list[Problem]:
    return [Problem(field_path("spec", *err.get("loc", ())), f"{err.get('msg')}{suffix}")
            for err in e.errors()]


def operator_problems(obj: Mapping[str, Any], facts: Facts) -> list[Problem]:
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    spec = obj.get("spec") or {}
    if kind == "PipelineRun":
        try:
            pr = PipelineRunSpec.model_validate(spec)
        except ValidationError as e:
            return _model_problems(e)
        return prvalidate.validate_spec(pr, name)
    if kind == "VirtualCluster":
        try:
            vc = VirtualClusterSpec.model_validate(spec)
        except ValidationError as e:
            return _model_problems(e, ": the CRD and the operator disagree; upgrade both")
        provider = vc.provider if vc.provider != "auto" else facts.provider
        return vcvalidate.validate(vc, provider, facts.catalog)
    if kind == "SharedStorage":
        try:
            ss = SharedStorageSpec.model_validate(spec)
        except ValidationError as e:
            return _model_problems(e)
        namespace = str(meta.get("namespace") or "default")
        vcs = facts.virtual_clusters
        cluster = ssvalidate.ClusterFacts(
            virtual_clusters=None if vcs is None else vcs.get(namespace, {}),
            storage_classes=facts.storage_classes,
            default_storage_class=facts.default_storage_class,
            cluster_cidrs=list(facts.cluster_cidrs))
        return ssvalidate.validate(ss, name, cluster)
    return []


def facts_from_objects(objects: Sequence[Mapping[str, Any]], base: Facts) -> Facts:
    """Add what the files validated together tell: their VirtualClusters (by namespace)
    and StorageClasses (the default one by its annotation)."""
    vcs: dict[str, dict[str, list[str]]] = {}
    for ns, vcname, pools in ((k, n, p) for k, v in (base.virtual_clusters or {}).items()
                              for n, p in v.items()):
        vcs.setdefault(ns, {})[vcname] = list(pools)
    classes = set(base.storage_classes or ())
    default_class = base.default_storage_class
    seen_vc = base.virtual_clusters is not None
    seen_sc = base.storage_classes is not None
    for o in objects:
        meta = o.get("metadata") or {}
        if o.get("kind") == "VirtualCluster" and meta.get("name"):
            pools = ((o.get("spec") or {}).get("pools")) or []
            names = [str(p.get("name")) for p in pools if isinstance(p, Mapping)]
            vcs.setdefault(str(meta.get("namespace") or "default"), {})[str(meta["name"])] = names
            seen_vc = True
        elif o.get("kind") == "StorageClass" and meta.get("name"):
            classes.add(str(meta["name"]))
            seen_sc = True
            notes = meta.get("annotations") or {}
            if notes.get("storageclass.kubernetes.io/is-default-class") == "true":
                default_class = str(meta["name"])
    return Facts(provider=base.provider, catalog=base.catalog,
                 virtual_clusters=vcs if seen_vc else None,
                 storage_classes=frozenset(classes) if seen_sc else None,
                 default_storage_class=default_class, cluster_cidrs=base.cluster_cidrs)
