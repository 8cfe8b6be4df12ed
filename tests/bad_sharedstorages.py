"""SharedStorage inputs: good ones by name, and bad ones as (id, manifest, refused by
"cel" | "invalid", substring of the message).

"cel" cases are refused by the CRD's schema/CEL rules (run against the real API server
by the integration tests); "invalid" cases pass admission and get an Invalid condition
from nightshift.sharedstorage.validate with FACTS (tests/unit/test_sharedstorage_validate.py).
"""

from __future__ import annotations

import copy
from typing import Any

from nightshift.sharedstorage.validate import ClusterFacts

VC = "snfactory"
POOLS = ["workers", "imaging", "nfs", "storage"]
FACTS = ClusterFacts(
    virtual_clusters={VC: POOLS},
    storage_classes={"gp2", "gp3"},
    default_storage_class="gp2",
    cluster_cidrs=["10.0.0.0/16", "100.64.0.0/16"],
)
STRATUM1 = "http://cvmfs-stratum-one.cern.ch:8000/cvmfs/@fqrn@"


def ss(spec: dict[str, Any], name: str = "sw", namespace: str = "physics") -> dict[str, Any]:
    return {
        "apiVersion": "nightshift.io/v1alpha1",
        "kind": "SharedStorage",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-ss", "generation": 2},
        "spec": spec,
    }


GOOD: dict[str, dict[str, Any]] = {
    "nfs-dedicated": ss({
        "type": "nfs", "virtualCluster": VC,
        "nfs": {"server": "dedicated", "pool": "nfs",
                "backing": {"pvc": {"size": "500Gi", "storageClass": "gp3"}},
                "clients": {"pools": ["workers", "imaging"]}}}, name="raw"),
    "nfs-colocated-localdisk": ss({
        "type": "nfs", "virtualCluster": VC, "reclaimPolicy": "Delete",
        "nfs": {"server": "colocated", "pool": "workers", "backing": {"localDisk": True},
                "exportOptions": {"accessType": "RW", "squash": "root"},
                "clients": {"pools": ["workers"], "mountOptions": ["nfsvers=4.1", "nconnect=4"]}}},
        name="scratch"),
    "gluster-nufa": ss({
        "type": "glusterfs", "virtualCluster": VC,
        "glusterfs": {"layout": "nufa", "pool": "workers", "servers": 4, "bricksPerNode": 2,
                      "clients": {"pools": ["workers"]}}}, name="montage"),
    "gluster-distribute-replica": ss({
        "type": "glusterfs",
        "glusterfs": {"layout": "distribute", "replica": 2, "pool": "storage", "servers": 3,
                      "bricksPerNode": 2, "brickPath": "/data/bricks",
                      "clients": {"pools": ["workers", "imaging"]}}}, name="broadband"),
    "s3": ss({
        "type": "s3",
        "s3": {"bucket": "snfactory-raw", "prefix": "nights/", "region": "us-west-2",
               "credentialsSecret": "s3-keys", "cache": {"size": "200Gi"}}}, name="raw-s3"),
    "cvmfs-eks": ss({
        "type": "cvmfs", "virtualCluster": VC,
        "cvmfs": {
            "repositories": ["sft.cern.ch", "dune.opensciencegrid.org"],
            "client": {"cacheSize": "8Gi", "pools": ["workers", "imaging"]},
            "squid": {"replicas": {"min": 2, "max": 6}, "memoryCache": "2Gi",
                      "diskCache": "50Gi", "cpu": "2",
                      "upstreams": [STRATUM1, "http://cvmfs.fnal.gov:8000/cvmfs/@fqrn@"],
                      "allowedCIDRs": ["10.0.0.0/16"],
                      "service": {"type": "LoadBalancer"},
                      "hpa": {"targetCPUUtilization": 60}}}}, name="software"),
    "cvmfs-local": ss({
        "type": "cvmfs",
        "cvmfs": {
            "repositories": ["demo.nightshift.io"],
            "client": {"pools": ["workers"]},
            "squid": {"upstreams": ["http://10.96.0.50:8080/cvmfs/demo.nightshift.io"],
                      "pool": "workers"}}}, name="software"),
}


def good(case: str, **spec: Any) -> dict[str, Any]:
    """A copy of GOOD[case] with top-level spec fields replaced."""
    m = copy.deepcopy(GOOD[case])
    m["spec"].update(spec)
    return m


def _with(case: str, path: str, value: Any) -> dict[str, Any]:
    """GOOD[case] with the spec field at dotted `path` set (None: removed)."""
    m = copy.deepcopy(GOOD[case])
    cur = m["spec"]
    *parents, last = path.split(".")
    for p in parents:
        cur = cur[p]
    if value is None:
        cur.pop(last, None)
    else:
        cur[last] = value
    return m


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown-type", good("s3", type="ceph"), "cel", "Unsupported value"),
    ("type-without-block", ss({"type": "nfs"}), "cel", "set exactly one type block"),
    ("s3-bucket-path", _with("s3", "s3.bucket", "snfactory-raw/nights"), "cel",
     "not an s3:// URL or a path: put the key path in prefix"),
    ("s3-region-digits", _with("s3", "s3.region", "12345"), "cel",
     "must be a region name such as us-west-2"),
    ("two-blocks", good("s3", nfs=GOOD["nfs-dedicated"]["spec"]["nfs"]), "cel",
     "set exactly one type block"),
    ("missing-size", _with("nfs-dedicated", "nfs.backing.pvc.size", None), "cel",
     "backing.pvc needs size"),
    ("pvc-and-local-disk", _with("nfs-dedicated", "nfs.backing.localDisk", True), "cel",
     "backing takes exactly one of pvc or localDisk"),
    ("replica-does-not-divide",
     _with("gluster-distribute-replica", "glusterfs.bricksPerNode", 1), "cel",
     "replica must divide the brick count"),
    ("replica-above-servers", _with("gluster-distribute-replica", "glusterfs.servers", 1),
     "cel", "replica must be at most servers"),
    ("repository-not-dns", _with("cvmfs-local", "cvmfs.repositories", ["Demo_Repo"]), "cel",
     "repositories are fully qualified DNS-like names"),
    ("upstream-https", _with("cvmfs-local", "cvmfs.squid.upstreams",
                             ["https://s1.example.org/cvmfs/@fqrn@"]), "cel",
     "upstreams must be http:// URLs"),
    ("replicas-min-above-max", _with("cvmfs-eks", "cvmfs.squid.replicas", {"min": 4, "max": 2}),
     "cel", "replicas.min must not exceed replicas.max"),
    ("cidr-not-cidr", _with("cvmfs-eks", "cvmfs.squid.allowedCIDRs", ["everyone"]), "cel",
     "allowedCIDRs must be CIDRs"),
    ("name-too-long", ss(GOOD["s3"]["spec"], name="a" * 41), "cel", "at most 40 characters"),
    # Past admission: what only the operator can tell.
    ("pool-not-in-virtualcluster", _with("nfs-dedicated", "nfs.pool", "fileserver"),
     "invalid", "spec.nfs.pool: pool 'fileserver' is not in VirtualCluster 'snfactory'"),
    ("client-pool-not-in-virtualcluster",
     _with("cvmfs-eks", "cvmfs.client.pools", ["workers", "gpu"]),
     "invalid", "spec.cvmfs.client.pools[1]: pool 'gpu' is not in VirtualCluster"),
    ("unknown-virtualcluster", good("gluster-nufa", virtualCluster="astro"), "invalid",
     "spec.virtualCluster: no VirtualCluster 'astro'"),
    ("storage-class-missing",
     _with("nfs-dedicated", "nfs.backing.pvc.storageClass", "io9"), "invalid",
     "spec.nfs.backing.pvc.storageClass: no StorageClass 'io9' in the cluster"),
    ("acl-wider-than-cluster",
     _with("cvmfs-eks", "cvmfs.squid.allowedCIDRs", ["10.0.0.0/8"]), "invalid",
     "spec.cvmfs.squid.allowedCIDRs[0]: 10.0.0.0/8 is wider than the cluster's ranges"),
    ("acl-everyone", _with("cvmfs-eks", "cvmfs.squid.allowedCIDRs", ["0.0.0.0/0"]), "invalid",
     "spec.cvmfs.squid.allowedCIDRs[0]: 0.0.0.0/0 is wider"),
    ("acl-host-bits", _with("cvmfs-eks", "cvmfs.squid.allowedCIDRs", ["10.0.3.7/16"]),
     "invalid", "'10.0.3.7/16' is not a network address: write 10.0.0.0/16"),
    ("colocated-server-off-client-pools",
     _with("nfs-colocated-localdisk", "nfs.clients.pools", ["imaging"]), "invalid",
     "spec.nfs.pool: a colocated server shares a node with its clients"),
    ("nufa-without-local-clients",
     _with("gluster-nufa", "glusterfs.clients.pools", ["imaging"]), "invalid",
     "spec.glusterfs.layout: nufa writes new files to the writer's own brick"),
    ("upstreams-without-fqrn",
     _with("cvmfs-eks", "cvmfs.squid.upstreams", ["http://s1.example.org:8000/cvmfs/sft"]),
     "invalid", "spec.cvmfs.squid.upstreams[0]: 'http://s1.example.org:8000/cvmfs/sft' has no"),
    ("disk-cache-tiny", _with("cvmfs-eks", "cvmfs.squid.diskCache", "10Mi"), "invalid",
     "spec.cvmfs.squid.diskCache: '10Mi' is not a size of at least 1Gi"),
    ("nfs-version-3", _with("nfs-dedicated", "nfs.clients.mountOptions",
                            ["noatime", "nfsvers=3"]), "invalid",
     "spec.nfs.clients.mountOptions[1]: 'nfsvers=3': the server speaks NFSv4 over TCP only: "
     "use nfsvers=4.1"),
    ("nfs-over-udp", _with("nfs-dedicated", "nfs.clients.mountOptions", ["proto=udp"]),
     "invalid", "spec.nfs.clients.mountOptions[0]: 'proto=udp': the server speaks NFSv4 over "
     "TCP only: remove it"),
]


# The API server's exact errors for each "cel" case (Kubernetes v1.34, server-side dry
# run; each is a Status cause's field and message, as kubectl prints them), in sorted
# order since the API server's order is not fixed. `nightshift validate` must print
# exactly these (tests/unit/test_validate_cli.py); tests/integration/
# test_validate_parity.py compares both with a live API server.
API_SERVER_MESSAGES: dict[str, list[str]] = {
    "unknown-type": [
        "<nil>: Invalid value: null: some validation rules were not checked because the object "
        "was invalid; correct the existing errors to complete validation",
        'spec.type: Unsupported value: "ceph": supported values: "nfs", "glusterfs", "s3", '
        '"cvmfs"',
    ],
    "type-without-block": [
        'spec: Invalid value: "object": set exactly one type block, the one type names (type: '
        "nfs -> spec.nfs, glusterfs -> spec.glusterfs, s3 -> spec.s3, cvmfs -> spec.cvmfs)",
    ],
    "s3-bucket-path": [
        'spec.s3.bucket: Invalid value: "string": must be a bucket name alone, not an '
        "s3:// URL or a path: put the key path in prefix",
    ],
    "s3-region-digits": [
        'spec.s3.region: Invalid value: "string": must be a region name such as us-west-2: '
        "letters, digits and '-', not all digits, no '-' at either end",
    ],
    "two-blocks": [
        'spec: Invalid value: "object": set exactly one type block, the one type names (type: '
        "nfs -> spec.nfs, glusterfs -> spec.glusterfs, s3 -> spec.s3, cvmfs -> spec.cvmfs)",
    ],
    "missing-size": [
        'spec.nfs.backing: Invalid value: "object": backing.pvc needs size, e.g. 500Gi',
    ],
    "pvc-and-local-disk": [
        'spec.nfs.backing: Invalid value: "object": backing takes exactly one of pvc or '
        "localDisk: true",
    ],
    "replica-does-not-divide": [
        'spec.glusterfs: Invalid value: "object": replica must divide the brick count, servers '
        "x bricksPerNode",
    ],
    "replica-above-servers": [
        'spec.glusterfs: Invalid value: "object": replica must be at most servers (each copy on '
        "another server's disk)",
    ],
    "repository-not-dns": [
        'spec.cvmfs.repositories: Invalid value: "array": repositories are fully qualified '
        "DNS-like names such as sft.cern.ch (lowercase, dotted)",
    ],
    "upstream-https": [
        'spec.cvmfs.squid.upstreams: Invalid value: "array": upstreams must be http:// URLs '
        "with a host (CVMFS fetches over plain HTTP so that proxies can cache it)",
    ],
    "replicas-min-above-max": [
        'spec.cvmfs.squid.replicas: Invalid value: "object": replicas.min must not exceed '
        "replicas.max",
    ],
    "cidr-not-cidr": [
        'spec.cvmfs.squid.allowedCIDRs: Invalid value: "array": allowedCIDRs must be CIDRs such '
        "as 10.0.0.0/16",
    ],
    "name-too-long": [
        '<nil>: Invalid value: "object": the name must be at most 40 characters (it prefixes '
        "the names of the objects the operator makes)",
    ],
}
