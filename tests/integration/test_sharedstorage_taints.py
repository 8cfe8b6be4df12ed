"""A SharedStorage on a VirtualCluster pool with its own taints (spec.pools[].taints):
the real DaemonSet controller and scheduler put its cvmfs client and squid on the pool's
node, which carries the pool taint and the pool's own. Before, they tolerated only the
pool taint: the client DaemonSet left the node out (and counted itself complete) and the
squid stayed Pending."""

from __future__ import annotations

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import Kubectl
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import kwok_node_pool
from tests.integration.test_sharedstorage import ns, storage, storage_operator, wait_ready
from tests.integration.vcutil import vc_manifest

__all__ = ["ns", "storage_operator"]  # fixtures, used by name below

TAINT = {"key": "example.org/dedicated", "value": "software", "effect": "NoSchedule"}


def test_cvmfs_on_a_tainted_pool_runs_on_its_node(kube: Kube, kubectl: Kubectl,
                                                   storage_operator: OperatorProcess,
                                                   ns: str) -> None:
    pool = f"t-{ns}"
    node = kwok_node_pool(pool)
    node["spec"]["taints"].append(TAINT)
    kubectl.apply(node)
    try:
        kubectl.apply(vc_manifest("tainted", [{"name": pool, "class": "general",
                                               "taints": [TAINT]}], provider="static"), ns)
        kubectl.apply(storage(ns, "software", {
            "type": "cvmfs", "virtualCluster": "tainted",
            "cvmfs": {"repositories": ["sft.cern.ch"], "client": {"pools": [pool]},
                      "squid": {"pool": pool, "replicas": {"min": 1, "max": 1},
                                "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"]}}}))
        st = wait_ready(kube, storage_operator, ns, "software")["status"]
        assert st["clients"] == {"nodes": 1, "mounted": 1}, st
        pods = kube.list("v1", "Pod", ns, label_selector=f"{names.LABEL_STORAGE}=software")
        assert {p["spec"].get("nodeName") for p in pods} == {node["metadata"]["name"]}, pods
    finally:
        kube.delete("v1", "Node", node["metadata"]["name"])
