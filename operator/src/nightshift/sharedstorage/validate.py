"""What the CRD's CEL rules cannot check about a SharedStorage. Pure.

CEL sees one object: not the VirtualCluster whose pools it names, not the cluster's
StorageClasses, not the cluster's address ranges. The reconcile gathers those as
ClusterFacts; each problem names the field path and the fix, and an invalid storage
gets an Invalid condition and nothing applied (so nothing is left half created).
Rules CEL also enforces are repeated so an object admitted by an older CRD still gets
a clear message.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from nightshift.api import buckets
from nightshift.api.problems import Problem
from nightshift.sharedstorage.spec import STORAGE_TYPES, Cvmfs, Glusterfs, Nfs, SharedStorageSpec
from nightshift.virtualcluster.catalog import parse_quantity

MAX_NAME = 40
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
REPOSITORY = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")
# Without the cluster's ranges, squids may still never serve beyond private space:
# RFC 1918, the carrier-grade NAT range EKS custom networking uses, IPv6 ULAs.
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
MIN_DISK_CACHE = 2**30
MIN_MEMORY_CACHE = 16 * 2**20

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ClusterFacts:
    """What the reconcile read about the cluster; None or empty: not known, not checked."""

    # The VirtualClusters of the storage's namespace: name -> pool names.
    virtual_clusters: Mapping[str, Sequence[str]] | None = None
    # Their status.mode ("karpenter" or "static"), for those the operator has reconciled.
    virtual_cluster_modes: Mapping[str, str] | None = None
    storage_classes: Collection[str] | None = None
    default_storage_class: str | None = None
    # The cluster's pod and node address ranges (VPC CIDRs on EKS).
    cluster_cidrs: Sequence[str] = ()
    # spec.virtualCluster's pools -> their spec.pools[].taints (objects.Storage).
    pool_taints: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)


def validate(spec: SharedStorageSpec, name: str,
             facts: ClusterFacts = ClusterFacts()) -> list[Problem]:
    p: list[Problem] = []
    if len(name) > MAX_NAME or not DNS_LABEL.match(name):
        p.append(Problem("metadata.name", f"{name!r} must be a DNS label of at most "
                         f"{MAX_NAME} characters (it prefixes the objects the operator "
                         "makes); create the storage under a shorter name"))
    for t in STORAGE_TYPES:
        block = getattr(spec, t)
        if t == spec.type and block is None:
            p.append(Problem(f"spec.{t}", f"type is {t} but spec.{t} is not set: add it"))
        elif t != spec.type and block is not None:
            p.append(Problem(f"spec.{t}", f"type is {spec.type}: remove spec.{t} (one "
                             "type per SharedStorage; make another for this one)"))
    p += _pools(spec, facts)
    if spec.type == "nfs" and spec.nfs:
        p += _nfs(spec.nfs, facts)
    if spec.type == "glusterfs" and spec.glusterfs:
        p += _gluster(spec.glusterfs)
    if spec.type == "s3" and spec.s3:
        if bad := buckets.problem("spec.s3.bucket", spec.s3.bucket):
            p.append(bad)
        if bad := buckets.region_problem("spec.s3.region", spec.s3.region):
            p.append(bad)
        if spec.s3.endpoint and urlsplit(spec.s3.endpoint).scheme not in ("http", "https"):
            p.append(Problem("spec.s3.endpoint", f"{spec.s3.endpoint!r} is not an http(s) "
                             "URL: write e.g. http://versitygw.storage:7070"))
        p += _size("spec.s3.cache.size", spec.s3.cache.size, 1, "50Gi")
    if spec.type == "cvmfs" and spec.cvmfs:
        p += _cvmfs(spec.cvmfs, facts)
    return p


def virtual_cluster_mode(spec: SharedStorageSpec, facts: ClusterFacts) -> tuple[str | None, str]:
    """(mode, wait): its VirtualCluster's status.mode, and what to say while a storage
    that places pods on its pools waits for one (a workload's node affinity depends on
    it, and a StatefulSet or DaemonSet re-rendered later would restart its pods)."""
    vc = spec.virtual_cluster
    if vc is None or facts.virtual_cluster_modes is None or not _pool_refs(spec):
        return None, ""
    mode = facts.virtual_cluster_modes.get(vc)
    if mode:
        return mode, ""
    return None, (f"spec.virtualCluster: VirtualCluster {vc!r} has no status.mode yet: the "
                  "operator has not reconciled it, and the node affinity of this storage's "
                  "pods depends on whether Karpenter makes its nodes; nothing is applied "
                  f"until it is set (kubectl describe virtualcluster {vc})")


def _pool_refs(spec: SharedStorageSpec) -> list[tuple[str, str]]:
    refs: list[tuple[str, str]] = []
    if spec.type == "nfs" and spec.nfs:
        refs.append(("spec.nfs.pool", spec.nfs.pool))
        refs += [(f"spec.nfs.clients.pools[{i}]", x) for i, x in enumerate(spec.nfs.clients.pools)]
    if spec.type == "glusterfs" and spec.glusterfs:
        g = spec.glusterfs
        refs.append(("spec.glusterfs.pool", g.pool))
        refs += [(f"spec.glusterfs.clients.pools[{i}]", x) for i, x in enumerate(g.clients.pools)]
    if spec.type == "cvmfs" and spec.cvmfs:
        c = spec.cvmfs
        refs += [(f"spec.cvmfs.client.pools[{i}]", x) for i, x in enumerate(c.client.pools)]
        if c.squid.pool:
            refs.append(("spec.cvmfs.squid.pool", c.squid.pool))
    return refs


def _pools(spec: SharedStorageSpec, facts: ClusterFacts) -> list[Problem]:
    refs = _pool_refs(spec)
    vc = spec.virtual_cluster
    if vc is None or facts.virtual_clusters is None or not refs:
        return []
    if vc not in facts.virtual_clusters:
        known = ", ".join(sorted(facts.virtual_clusters)) or "none"
        return [Problem("spec.virtualCluster", f"no VirtualCluster {vc!r} in this namespace "
                        f"(have: {known}): create it or name one of them")]
    pools = list(facts.virtual_clusters[vc])
    return [Problem(path, f"pool {pool!r} is not in VirtualCluster {vc!r} (pools: "
                    f"{', '.join(pools) or 'none'}): name one of them or add the pool there")
            for path, pool in refs if pool not in pools]


def _size(path: str, value: str | None, minimum: float, example: str) -> list[Problem]:
    if value is None:
        return [Problem(path, f"is required: set a size, e.g. {example}")]
    try:
        ok = parse_quantity(value) >= minimum
    except ValueError:
        ok = False
    if ok:
        return []
    return [Problem(path, f"{value!r} is not a size of at least {_human(minimum)}: "
                    f"write e.g. {example}")]


def _human(n: float) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return f"{n:g} bytes"


def _nfs(nfs: Nfs, facts: ClusterFacts) -> list[Problem]:
    p: list[Problem] = []
    b = nfs.backing
    if (b.pvc is not None) == b.local_disk:
        p.append(Problem("spec.nfs.backing", "set exactly one of pvc (e.g. {size: 500Gi, "
                         "storageClass: gp3}) or localDisk: true"))
    if b.pvc is not None:
        p += _size("spec.nfs.backing.pvc.size", b.pvc.size, 1, "500Gi")
        sc = b.pvc.storage_class
        known = facts.storage_classes
        if known is not None:
            have = ", ".join(sorted(known)) or "none"
            if sc and sc not in known:
                p.append(Problem("spec.nfs.backing.pvc.storageClass", f"no StorageClass "
                                 f"{sc!r} in the cluster (have: {have}): name one of them "
                                 "or create it"))
            elif not sc and not facts.default_storage_class:
                p.append(Problem("spec.nfs.backing.pvc.storageClass", "not set and the "
                                 f"cluster has no default StorageClass (have: {have}): "
                                 "name one"))
    for j, opt in enumerate(nfs.clients.mount_options):
        # nfs.ganesha_conf: NFSv4 over TCP only (no rpcbind, no lock manager), so an
        # NFSv3 or UDP mount fails on every client with a FailedMount the storage never sees.
        key, _, value = opt.strip().partition("=")
        if key in ("nfsvers", "vers") and not value.startswith("4"):
            p.append(Problem(f"spec.nfs.clients.mountOptions[{j}]", f"{opt!r}: the server "
                             "speaks NFSv4 over TCP only: use nfsvers=4.1"))
        elif (key == "proto" and value.startswith("udp")) or key == "udp":
            p.append(Problem(f"spec.nfs.clients.mountOptions[{j}]", f"{opt!r}: the server "
                             "speaks NFSv4 over TCP only: remove it (TCP is the default)"))
    if nfs.server == "colocated" and nfs.pool not in nfs.clients.pools:
        p.append(Problem("spec.nfs.pool", f"a colocated server shares a node with its "
                         f"clients, but pool {nfs.pool!r} is not in clients.pools: add it "
                         "there or use server: dedicated"))
    return p


def _gluster(g: Glusterfs) -> list[Problem]:
    p: list[Problem] = []
    bricks = g.servers * g.bricks_per_node
    if g.servers < 1:
        p.append(Problem("spec.glusterfs.servers", "must be at least 1"))
    if g.bricks_per_node < 1:
        p.append(Problem("spec.glusterfs.bricksPerNode", "must be at least 1"))
    if g.replica is not None:
        if g.replica < 2:
            p.append(Problem("spec.glusterfs.replica", "must be 2 or 3; omit it for no copies"))
        elif bricks % g.replica:
            p.append(Problem("spec.glusterfs.replica", f"replica {g.replica} does not divide "
                             f"the {bricks} bricks (servers {g.servers} x bricksPerNode "
                             f"{g.bricks_per_node}): change servers or bricksPerNode"))
        if g.replica > g.servers:
            p.append(Problem("spec.glusterfs.replica", f"replica {g.replica} needs at least "
                             f"{g.replica} servers (copies on one node protect nothing): "
                             f"raise servers to {g.replica}"))
    if g.layout == "nufa" and g.pool not in g.clients.pools:
        p.append(Problem("spec.glusterfs.layout", f"nufa writes new files to the writer's "
                         f"own brick, but the brick pool {g.pool!r} is not in "
                         "clients.pools, so no client has one: add the pool to "
                         "clients.pools or use layout: distribute"))
    if not g.brick_path.startswith("/") or g.brick_path.rstrip("/") == "":
        p.append(Problem("spec.glusterfs.brickPath", f"{g.brick_path!r} must be an absolute "
                         "directory other than /, e.g. /mnt/k8s-disks/0/nightshift/gluster"))
    return p


def _network(text: str) -> Network | None:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None


def _within(net: Network, ranges: Sequence[Network]) -> bool:
    return any(net.version == r.version and net.subnet_of(r)  # type: ignore[arg-type]
               for r in ranges)


def _cvmfs(cv: Cvmfs, facts: ClusterFacts) -> list[Problem]:
    p: list[Problem] = []
    for i, repo in enumerate(cv.repositories):
        if not REPOSITORY.match(repo):
            p.append(Problem(f"spec.cvmfs.repositories[{i}]", f"{repo!r} is not a fully "
                             "qualified repository name: write e.g. sft.cern.ch"))
        if repo in cv.repositories[:i]:
            p.append(Problem(f"spec.cvmfs.repositories[{i}]", f"{repo!r} is listed twice"))
    sq = cv.squid
    p += _size("spec.cvmfs.client.cacheSize", cv.client.cache_size, MIN_DISK_CACHE, "4Gi")
    p += _size("spec.cvmfs.squid.memoryCache", sq.memory_cache, MIN_MEMORY_CACHE, "256Mi")
    p += _size("spec.cvmfs.squid.diskCache", sq.disk_cache, MIN_DISK_CACHE, "20Gi")
    try:
        cpu_ok = parse_quantity(sq.cpu) > 0
    except ValueError:
        cpu_ok = False
    if not cpu_ok:
        p.append(Problem("spec.cvmfs.squid.cpu", f"{sq.cpu!r} is not a CPU amount above 0: "
                         "write e.g. 500m or 2"))
    if sq.replicas.min < 1 or sq.replicas.min > sq.replicas.max:
        p.append(Problem("spec.cvmfs.squid.replicas", f"min {sq.replicas.min} and max "
                         f"{sq.replicas.max}: need 1 <= min <= max"))
    for i, url in enumerate(sq.upstreams):
        path = f"spec.cvmfs.squid.upstreams[{i}]"
        parts = urlsplit(url)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if parts.scheme != "http" or not parts.hostname or not port_ok:
            p.append(Problem(path, f"{url!r} is not an http:// URL with a host: write e.g. "
                             "http://cvmfs-stratum-one.cern.ch:8000/cvmfs/@fqrn@"))
        elif len(cv.repositories) > 1 and "@fqrn@" not in url:
            p.append(Problem(path, f"{url!r} has no @fqrn@, so every repository would be "
                             "fetched from the same URL: put @fqrn@ where the repository "
                             "name goes, e.g. http://host:8000/cvmfs/@fqrn@"))
    p += _cidrs(sq.allowed_cidrs, facts)
    return p


def _cidrs(allowed: Sequence[str], facts: ClusterFacts) -> list[Problem]:
    path = "spec.cvmfs.squid.allowedCIDRs"
    cluster = [n for n in (_network(c) for c in facts.cluster_cidrs) if n is not None]
    if not allowed:
        if cluster:
            return []
        return [Problem(path, "is empty and the operator does not know the cluster's pod "
                        "and node ranges: list them, e.g. [10.0.0.0/16]")]
    ranges = cluster or [n for n in (_network(c) for c in PRIVATE_RANGES) if n is not None]
    what = "the cluster's ranges" if cluster else "private address space"
    shown = ", ".join(str(r) for r in ranges)
    p: list[Problem] = []
    for i, text in enumerate(allowed):
        net = _network(text)
        if net is None:
            loose = _loose(text)
            fix = f"write {loose}" if loose else "write e.g. 10.0.0.0/16"
            p.append(Problem(f"{path}[{i}]", f"{text!r} is not a network address: {fix}"))
        elif not _within(net, ranges):
            p.append(Problem(f"{path}[{i}]", f"{text} is wider than {what} ({shown}): the "
                             "squids would serve addresses outside the cluster; narrow it "
                             "to the cluster's pod and node ranges"))
    return p


def _loose(text: str) -> str | None:
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        return None


def effective_squid_cidrs(spec: SharedStorageSpec, facts: ClusterFacts) -> list[str]:
    """The ranges the squids serve: allowedCIDRs, or the cluster's when it is empty."""
    if spec.cvmfs is None:
        return []
    return list(spec.cvmfs.squid.allowed_cidrs or facts.cluster_cidrs)
