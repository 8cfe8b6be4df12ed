"""What a VirtualCluster pass reads: installed CRDs, its nodes and NodeClaims, the CPU
pending pods ask of each pool, its own NodePools and node classes, the runs that use
it (when it is being deleted), and the prices of the instances it runs.

Every read is a labeled LIST or a GET: never all pods, never all nodes. Pending pods
are read only in the VirtualCluster's namespace, only pipeline pods, only unscheduled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from nightshift.api import names
from nightshift.aws.clients import Ec2Access, unknown_price
from nightshift.aws.prices import PriceFn, catalog_prices, load_kwok_catalog
from nightshift.kube import Kube
from nightshift.pipelinerun.spec import TERMINAL_PHASES
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.catalog import InstanceCatalog, parse_quantity
from nightshift.virtualcluster.cost import price_keys
from nightshift.virtualcluster.nodeclasses import EC2_API, KWOK_API
from nightshift.virtualcluster.nodepools import (
    KARPENTER_API,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
)
from nightshift.virtualcluster.placement import existing_groups
from nightshift.virtualcluster.plan import Observed, removed_pools, retired_groups
from nightshift.virtualcluster.provider import (
    CRD_EC2NODECLASS,
    CRD_KWOKNODECLASS,
    CRD_NODEPOOL,
    WATCHED_CRDS,
    detect_provider,
)
from nightshift.virtualcluster.spec import VirtualClusterSpec

log = logging.getLogger("nightshift")

Obj = dict[str, Any]

# (apiVersion, kind, the CRD that serves it): what a VirtualCluster may own.
NODEPOOL = (KARPENTER_API, "NodePool", CRD_NODEPOOL)
NODECLAIM = (KARPENTER_API, "NodeClaim", CRD_NODEPOOL)
EC2NODECLASS = (EC2_API, "EC2NodeClass", CRD_EC2NODECLASS)
KWOKNODECLASS = (KWOK_API, "KWOKNodeClass", CRD_KWOKNODECLASS)
NODECLASSES = (EC2NODECLASS, KWOKNODECLASS)

# CRDs change when someone installs Karpenter, not between two passes.
CRD_TTL_SECONDS = 30.0


@dataclass
class CrdCache:
    """Which of the CRDs a VirtualCluster may use are installed, re-read every TTL."""

    ttl: float = CRD_TTL_SECONDS
    _seen: tuple[float, frozenset[str]] | None = None

    def installed(self, kube: Kube) -> frozenset[str]:
        now = time.monotonic()
        if self._seen is None or self._seen[0] < now:
            found = frozenset(c for c in WATCHED_CRDS if kube.crd_exists(c))
            self._seen = (now + self.ttl, found)
        return self._seen[1]


def load_catalog(path: str) -> tuple[InstanceCatalog | None, str]:
    """The KWOK provider's instance catalog (NIGHTSHIFT_INSTANCE_CATALOG), or None and why
    not: when not configured or unreadable, kwok pools accept any family and prices are
    unknown, and each VirtualCluster's status says so (Sources.price_problem)."""
    if not path:
        return None, ""
    try:
        return load_kwok_catalog(path), ""
    except (OSError, ValueError) as e:
        why = (f"instance catalog {path} (NIGHTSHIFT_INSTANCE_CATALOG) is unreadable: {e}; "
               "point the chart value config.instanceCatalog at the KWOK provider's "
               "instance-type file and restart the operator")
        log.warning("%s", why)
        return None, why


@dataclass(frozen=True)
class Sources:
    """What a pass reads besides the VirtualCluster's own objects, built once."""

    crds: CrdCache
    catalog: InstanceCatalog | None
    aws: Ec2Access
    # Why a configured catalog is not loaded: said instead of "no instance catalog".
    catalog_problem: str = ""

    def price_fn(self, provider: str) -> PriceFn:
        if provider == "aws":
            return self.aws.prices()
        return unknown_price if self.catalog is None else catalog_prices(self.catalog)

    def price_problem(self, provider: str, keys: Iterable[tuple[str, str]]) -> str:
        """Why the prices of `keys` are unknown (after price_fn looked them up), or ""."""
        keys = list(keys)
        if not keys:
            return ""
        if provider == "aws":
            return self.aws.price_problem(keys)
        if self.catalog is None:
            return self.catalog_problem or (
                "no instance catalog: set NIGHTSHIFT_INSTANCE_CATALOG (chart value "
                "config.instanceCatalog) to the KWOK provider's instance-type file")
        return ""


def _catalog(sources: Sources, provider: str,
             spec: VirtualClusterSpec | None) -> InstanceCatalog | None:
    """The names' catalog: KWOK's file, or the region's types on AWS (never asked for
    elsewhere: a static cluster may have no AWS at all)."""
    if provider == "kwok":
        return sources.catalog
    if provider != "aws" or spec is None:
        return None
    return sources.aws.catalog([n for p in spec.pools
                                for n in (*p.families, *p.instance_types)])


def observe(kube: Kube, sources: Sources, namespace: str, name: str,
            now: datetime) -> Observed | None:
    """Everything the planner needs, prices included; None when the object is gone."""
    vc = kube.get(names.API_VERSION, names.VIRTUALCLUSTER, name, namespace)
    if vc is None:
        return None
    crds = sources.crds.installed(kube)
    deleting = bool(vc["metadata"].get("deletionTimestamp"))
    try:
        spec: VirtualClusterSpec | None = VirtualClusterSpec.model_validate(vc.get("spec") or {})
    except ValidationError:
        spec = None
    provider = detect_provider(crds, spec.provider).provider if spec else "kwok"
    static = static_pools(spec, crds)
    claims = nodeclaims(kube, crds, namespace, name)
    node_list = nodes(kube, namespace, name, static)
    price = sources.price_fn(provider)
    prices = {pair: price(*pair)
              for pair in sorted(instance_pairs(node_list) | price_keys(
                  claims, (vc.get("status") or {}).get("cost")))}
    ours = owned(kube, crds, namespace, name, [NODEPOOL, *NODECLASSES])
    # The runs matter to a deletion, and to pools removed from the spec whose NodePools
    # are still there: those stay while runs use this VirtualCluster (plan.retained).
    removing = spec is not None and bool(removed_pools(spec, ours))
    catalog = _catalog(sources, provider, spec)
    named = spec is not None and any(p.families or p.instance_types for p in spec.pools)
    unchecked = (sources.aws.types.error
                 if provider == "aws" and catalog is None and named else "")
    return Observed(
        vc=vc, crds=crds,
        catalog=catalog, names_unchecked=unchecked,
        owned=ours,
        nodeclaims=claims, nodes=node_list,
        pending_cpu=pending_cpu(kube, namespace, [p.name for p in spec.pools]) if spec else {},
        prices=prices,
        price_problem=sources.price_problem(provider,
                                            [k for k, v in prices.items() if v is None]),
        running_runs=running_runs(kube, namespace, name) if deleting or removing else (),
        groups_left=frozenset(existing_groups(sources.aws, vc, retired_groups(vc, spec)))
        if provider == "aws" and not deleting else frozenset(),
        now=now)


def static_pools(spec: VirtualClusterSpec | None, crds: frozenset[str]) -> tuple[str, ...]:
    if spec is None or detect_provider(crds, spec.provider).mode != "static":
        return ()
    return tuple(p.name for p in spec.pools)


def instance_pairs(node_list: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    out = set()
    for node in node_list:
        labels = node.get("metadata", {}).get("labels") or {}
        itype, cap = labels.get(LABEL_INSTANCE_TYPE), labels.get(LABEL_CAPACITY_TYPE)
        if itype and cap:
            out.add((str(itype), str(cap)))
    return out


def owner_selector(namespace: str, vc: str) -> str:
    return (f"{names.LABEL_VIRTUAL_CLUSTER}={vc},"
            f"{vcnames.LABEL_VC_NAMESPACE}={namespace}")


def owned(kube: Kube, crds: Iterable[str], namespace: str, vc: str,
          kinds: Sequence[tuple[str, str, str]]) -> list[Obj]:
    """Our cluster-scoped objects of `kinds` whose CRD is installed."""
    out: list[Obj] = []
    for api_version, kind, crd in kinds:
        if crd in crds:
            out += kube.list(api_version, kind, label_selector=owner_selector(namespace, vc))
    return out


def nodes(kube: Kube, namespace: str, vc: str, static_pools: Sequence[str] = ()) -> list[Obj]:
    """Karpenter's nodes carry our labels; static nodes only nightshift.io/pool."""
    if static_pools:
        sel = f"{names.LABEL_POOL} in ({','.join(sorted(static_pools))})"
        return kube.list("v1", "Node", label_selector=sel)
    return kube.list("v1", "Node", label_selector=owner_selector(namespace, vc))


def nodeclaims(kube: Kube, crds: Iterable[str], namespace: str, vc: str) -> list[Obj]:
    return owned(kube, crds, namespace, vc, [NODECLAIM])


def pending_cpu(kube: Kube, namespace: str, pools: Iterable[str]) -> dict[str, float]:
    """CPU that unscheduled pipeline pods in the namespace ask of each pool.

    Pipeline pods carry nightshift.io/pipeline-run but no pool label; their pool is
    their nodeSelector. The field selector keeps this to pods not yet on any node.
    """
    wanted = set(pools)
    pods = kube.list("v1", "Pod", namespace, label_selector=names.LABEL_RUN,
                     field_selector="status.phase=Pending,spec.nodeName=")
    out: dict[str, float] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        pool = (spec.get("nodeSelector") or {}).get(names.LABEL_POOL)
        if pool in wanted:
            out[pool] = out.get(pool, 0.0) + pod_cpu(spec)
    return {k: round(v, 3) for k, v in out.items()}


def pod_cpu(spec: Mapping[str, Any]) -> float:
    """The scheduler's view of a pod's CPU request: containers and sidecars run
    together, plain init containers one at a time before them."""
    def req(c: Mapping[str, Any]) -> float:
        return parse_quantity(((c.get("resources") or {}).get("requests") or {}).get("cpu", 0))

    inits = spec.get("initContainers") or []
    sidecars = sum(req(c) for c in inits if c.get("restartPolicy") == "Always")
    running = sum(req(c) for c in spec.get("containers") or []) + sidecars
    first = max((req(c) for c in inits if c.get("restartPolicy") != "Always"), default=0.0)
    return max(running, first + sidecars)


def running_runs(kube: Kube, namespace: str, vc: str) -> list[str]:
    """PipelineRuns of the namespace that use this VirtualCluster and have not ended."""
    out = []
    for run in kube.list(names.API_VERSION, names.PIPELINERUN, namespace):
        if (run.get("spec") or {}).get("virtualCluster") != vc:
            continue
        if run["metadata"].get("deletionTimestamp"):
            continue
        if (run.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        out.append(str(run["metadata"]["name"]))
    return sorted(out)
