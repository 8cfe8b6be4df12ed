"""A SharedStorage whose pods the API server refuses says so on its Ready condition, from
the real controllers' words: the squid Deployment's ReplicaFailure condition (a full
ResourceQuota) and the client DaemonSet's FailedCreate events (the namespace's Pod
Security level refusing a privileged mounter). Mended, the storage becomes Ready."""

from __future__ import annotations

from nightshift.kube import Kube
from tests.clusterutil import Kubectl, wait_for
from tests.integration.conftest import OperatorProcess
from tests.integration.test_sharedstorage import (
    condition,
    get,
    kwok_pool,
    ns,
    storage,
    storage_operator,
    wait_ready,
)

__all__ = ["kwok_pool", "ns", "storage_operator"]  # fixtures, used by name below


def test_refused_servers_and_mounters_are_named_then_mended(
        kube: Kube, kubectl: Kubectl, storage_operator: OperatorProcess, ns: str,
        kwok_pool: str) -> None:
    # PodSecurity admits or refuses before ResourceQuota counts: the privileged client
    # DaemonSet meets the first, the squid Deployment the second.
    kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
    kubectl.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "none"},
                   "spec": {"hard": {"pods": "0"}}}, ns)
    kubectl.apply(storage(ns, "software", {
        "type": "cvmfs",
        "cvmfs": {"repositories": ["demo.nightshift.io"], "client": {"pools": [kwok_pool]},
                  "squid": {"pool": kwok_pool,
                            "upstreams": ["http://s1.example.org:8000/cvmfs/@fqrn@"]}}}))

    def both() -> str | None:
        message = str(condition(get(kube, ns, "software"), "Ready").get("message", ""))
        return message if ("Deployment software-squid cannot" in message
                           and "DaemonSet software-cvmfs-client cannot" in message) else None

    message = wait_for("both refusals on Ready", both, 120,
                       explain=lambda: str(get(kube, ns, "software").get("status")))
    assert ("Deployment software-squid cannot create its pods: exceeded quota: none, "
            "requested: pods=1, limited: pods=0; its pods are created as the namespace's "
            "ResourceQuota frees up; else raise it") in message, message
    assert ('DaemonSet software-cvmfs-client cannot create its pods: violates PodSecurity '
            '"baseline:latest": ') in message, message
    assert ("the storage's servers and mounters need a namespace whose "
            "pod-security.kubernetes.io/enforce level admits them") in message, message
    assert condition(get(kube, ns, "software"), "Ready")["status"] == "False"
    print(message)  # what a user sees, for `pytest -s`
    # Mended: the controllers' retries make the pods, and the refusals go.
    kubectl("-n", ns, "delete", "resourcequota", "none")
    kubectl("label", "--overwrite", "namespace", ns,
            "pod-security.kubernetes.io/enforce=privileged")
    obj = wait_ready(kube, storage_operator, ns, "software")
    assert "cannot create" not in str(obj["status"]), obj["status"]
