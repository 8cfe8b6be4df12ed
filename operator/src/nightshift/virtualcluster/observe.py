"""What a VirtualCluster pass reads: installed CRDs, its nodes and NodeClaims, the CPU
pending pods ask of each pool, its own NodePools and node classes, and prices.

Every read is a labeled LIST or a GET: never all pods, never all nodes. Pending pods
are read only in the VirtualCluster's namespace, only pipeline pods, only unscheduled.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3

from nightshift.api import names
from nightshift.aws.prices import (
    PRICING_REGION,
    AwsPrices,
    PriceFn,
    catalog_prices,
    load_kwok_catalog,
)
from nightshift.config import OperatorConfig
from nightshift.kube import Kube
from nightshift.localcluster.paths import Layout
from nightshift.pipelinerun.spec import TERMINAL_PHASES
from nightshift.virtualcluster import objectnames as vcnames
from nightshift.virtualcluster.catalog import InstanceCatalog, parse_quantity
from nightshift.virtualcluster.nodeclasses import EC2_API, KWOK_API
from nightshift.virtualcluster.nodepools import KARPENTER_API
from nightshift.virtualcluster.provider import (
    CRD_EC2NODECLASS,
    CRD_KWOKNODECLASS,
    CRD_NODEPOOL,
    WATCHED_CRDS,
)

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
class Clouds:
    """Process-wide, lazily built: the instance catalog, AWS clients and price caches."""

    config: OperatorConfig
    _catalog: InstanceCatalog | None = None
    _catalog_tried: bool = False
    _aws_prices: PriceFn | None = None
    _ec2: Any = None
    _crds: tuple[float, frozenset[str]] | None = None
    # Overrides for tests (a stubbed EC2 client).
    ec2_factory: Any = None
    errors: list[str] = field(default_factory=list)

    def installed_crds(self, kube: Kube) -> frozenset[str]:
        now = time.monotonic()
        if self._crds is None or self._crds[0] < now:
            found = frozenset(c for c in WATCHED_CRDS if kube.crd_exists(c))
            self._crds = (now + CRD_TTL_SECONDS, found)
        return self._crds[1]

    def catalog(self) -> InstanceCatalog | None:
        """The KWOK instance catalog: NIGHTSHIFT_INSTANCE_CATALOG, else the local
        cluster's copy; None when neither exists (then prices are unknown)."""
        if not self._catalog_tried:
            self._catalog_tried = True
            path = self.config.instance_catalog
            if not path:
                try:
                    candidate = Layout.discover().instance_types_file
                    path = str(candidate) if candidate.exists() else ""
                except Exception:  # no local cluster layout here (in a pod, on EKS)
                    path = ""
            if path:
                try:
                    self._catalog = load_kwok_catalog(path)
                except (OSError, ValueError) as e:
                    log.warning("instance catalog %s unreadable: %s; set "
                                "NIGHTSHIFT_INSTANCE_CATALOG to the KWOK provider's "
                                "instance-type file", path, e)
        return self._catalog

    def ec2(self) -> Any:
        if self._ec2 is None:
            if self.ec2_factory is not None:
                self._ec2 = self.ec2_factory()
            else:
                self._ec2 = boto3.client("ec2")
        return self._ec2

    def prices(self, provider: str) -> PriceFn:
        if provider == "aws":
            if self._aws_prices is None:
                try:
                    self._aws_prices = _aws_prices(self.ec2())
                except Exception as e:  # no region or credentials: prices stay unknown
                    log.warning("AWS prices unavailable: %s; set AWS_REGION and the "
                                "operator's AWS credentials", e)
                    self._aws_prices = _unknown
            return self._aws_prices
        catalog = self.catalog()
        return _unknown if catalog is None else catalog_prices(catalog)


def _unknown(_type: str, _capacity: str) -> float | None:
    return None


def _aws_prices(ec2: Any) -> PriceFn:
    try:
        region = ec2.meta.region_name or os.environ.get("AWS_REGION", "us-east-1")
        pricing = boto3.client("pricing", region_name=PRICING_REGION)
        return AwsPrices(region, pricing, ec2, ttl_seconds=3600)
    except Exception as e:  # no credentials or region: prices stay unknown
        log.warning("AWS prices unavailable: %s", e)
        return _unknown


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


def not_ready(objs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Karpenter's own Ready=False messages on our NodePools and node classes."""
    out = []
    for obj in objs:
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "False":
                out.append(f"{obj['kind']} {obj['metadata']['name']} is not ready "
                           f"({c.get('reason', '')}: {c.get('message', '')})")
    return out


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
