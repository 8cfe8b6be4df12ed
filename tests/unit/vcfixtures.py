"""Shared VirtualCluster fixtures for the unit tests."""

from __future__ import annotations

from typing import Any

from nightshift.virtualcluster.catalog import InstanceCatalog, parse_kwok_catalog

AWS_NODECLASS: dict[str, Any] = {
    "role": "KarpenterNodeRole-demo",
    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    "tags": {"team": "supernova"},
}

POOLS: dict[str, dict[str, Any]] = {
    "spot-compute": {"name": "workers", "class": "compute", "capacity": "spot", "maxCPU": 64},
    "memory": {"name": "imaging", "class": "memory", "families": ["r5d", "r6id"],
               "capacity": "on-demand", "maxMemory": "1Ti", "localDisk": "raid0"},
    "spot-then-on-demand": {"name": "reduce", "class": "general",
                            "capacity": "spot-then-on-demand", "maxCPU": 128, "maxNodes": 20},
    "cluster-compute": {"name": "mpi", "class": "cluster-compute", "placement": "cluster",
                        "capacity": "on-demand", "instanceTypes": ["c5n.18xlarge"],
                        "maxCPU": 576},
}


def vc(*pools: dict[str, Any], name: str = "snfactory", namespace: str = "physics",
       **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nightshift.io/v1alpha1",
        "kind": "VirtualCluster",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-1", "generation": 3},
        "spec": {"pools": list(pools), "nodeClass": AWS_NODECLASS, **spec},
    }


def _entry(name: str, cpu: int, mem_gi: int, spot: float, od: float,
           arch: str = "x86_64") -> dict[str, Any]:
    def off(cap: str, price: float) -> dict[str, Any]:
        return {"Price": price, "Available": True, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [cap]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]},
        ]}
    return {"name": name, "offerings": [off("spot", spot), off("on-demand", od)],
            "architecture": arch, "operatingSystems": ["linux"],
            "resources": {"cpu": str(cpu), "memory": f"{mem_gi}Gi", "pods": "110"}}


CATALOG_ENTRIES = [
    _entry("c6i.large", 2, 4, 0.0595, 0.085),
    _entry("c6i.2xlarge", 8, 16, 0.238, 0.34),
    _entry("c6id.large", 2, 4, 0.07, 0.1008),
    _entry("c7i.large", 2, 4, 0.06, 0.08925),
    _entry("c7g.large", 2, 4, 0.05, 0.0725, arch="arm64"),
    _entry("c5n.18xlarge", 72, 192, 1.5, 3.888),
    _entry("r6i.large", 2, 16, 0.08, 0.126),
    _entry("r6id.2xlarge", 8, 64, 0.3, 0.6048),
    _entry("r7i.large", 2, 16, 0.09, 0.1323),
    _entry("r5d.large", 2, 16, 0.05, 0.144),
    _entry("m6i.large", 2, 8, 0.07, 0.096),
]


def catalog() -> InstanceCatalog:
    return parse_kwok_catalog(CATALOG_ENTRIES)
