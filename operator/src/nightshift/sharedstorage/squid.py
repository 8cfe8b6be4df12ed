"""The squid caches of a cvmfs SharedStorage: squid.conf, Deployment, Service, HPA. Pure.

The configuration follows frontier-squid's choices for CVMFS: a forward proxy that
serves only the cluster's address ranges and fetches only from the named stratum-1
hosts and ports, large objects allowed, concurrent misses for one URL collapsed into
one upstream fetch, and refresh rules that keep the repository manifest fresh while
content-addressed data objects stay cached.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from nightshift.api import names
from nightshift.sharedstorage.objects import (
    COMPONENT_SQUID,
    TERMINATION_MESSAGE,
    Platform,
    Storage,
    config_hash,
    mebibytes,
    pool_affinity,
    pool_tolerations,
)
from nightshift.sharedstorage.spec import Cvmfs
from nightshift.virtualcluster.catalog import parse_quantity

IMAGE = "nightshift-squid"
APP = "squid"
PORT = 3128
CONF_KEY = "squid.conf"
CONF_DIR = "/etc/squid/nightshift"
CACHE_DIR = "/var/cache/squid"
# Debian's proxy user: the image runs squid as it, never as root.
PROXY_UID = 13
# Squid's index costs about 10-16 MiB of memory per GiB of disk cache (squid FAQ);
# the rest is buffers for objects in transit and the process itself.
INDEX_MIB_PER_GIB = 16
BASE_MIB = 128
# cache_dir gets this share of the emptyDir: swap.state and the journal live there too.
DISK_SHARE = 0.9
MAX_OBJECT = "1 GB"
STATS_ACL = "nightshift_stats"
# The cache manager page the status reads (status.parse_squid_counters): cumulative
# totals, turned into rates between two readings.
STATS_PATH = "/squid-internal-mgr/counters"
# A removed squid takes its cache with it: scale down one pod at a time, slowly.
SCALE_DOWN_WINDOW_S = 600

AWS_LB_ANNOTATIONS = {
    # The AWS Load Balancer Controller makes an NLB for these (the in-tree controller
    # would make a Classic ELB): internal, with pods as targets (no second hop through
    # a node port).
    "service.beta.kubernetes.io/aws-load-balancer-type": "external",
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
}


def _cvmfs(st: Storage) -> Cvmfs:
    if st.spec.cvmfs is None:
        raise ValueError(f"SharedStorage {st.namespace}/{st.name} is not of type cvmfs")
    return st.spec.cvmfs


def service_host(st: Storage) -> str:
    """The squids' in-cluster DNS name: what CVMFS clients use as CVMFS_HTTP_PROXY."""
    return f"{st.object_name('squid')}.{st.namespace}.svc.cluster.local"


def proxy_url(st: Storage) -> str:
    return f"http://{service_host(st)}:{PORT}"


def _upstreams(urls: Sequence[str]) -> tuple[list[str], list[str], list[int]]:
    """Host names, IP literals and ports of the stratum-1 URLs."""
    hosts: set[str] = set()
    ips: set[str] = set()
    ports: set[int] = set()
    for url in urls:
        parts = urlsplit(url.replace("@fqrn@", "fqrn").replace("@org@", "org"))
        host = parts.hostname or ""
        try:
            ips.add(str(ipaddress.ip_address(host)))
        except ValueError:
            hosts.add(host.lower())
        ports.add(parts.port or 80)
    return sorted(hosts), sorted(ips), sorted(ports)


def memory_object_limit_mib(cache_mem_mib: int) -> int:
    """Largest object kept in memory: 1/16 of cache_mem, 1..64 MiB.

    Big enough that a hot 10 MB object (the HEP cloud's large-object test) is served
    from memory once cache_mem is 256 MiB or more, small enough that a few such objects
    never evict the many small catalog files.
    """
    return max(1, min(64, cache_mem_mib // 16))


def squid_conf(st: Storage, allowed_cidrs: Sequence[str]) -> str:
    """squid.conf for the storage's squids; `allowed_cidrs` are the client ranges."""
    cv = _cvmfs(st)
    sq = cv.squid
    cache_mem = mebibytes(parse_quantity(sq.memory_cache))
    disk_mib = int(mebibytes(parse_quantity(sq.disk_cache)) * DISK_SHARE)
    hosts, ips, ports = _upstreams(sq.upstreams)
    lines = [
        f"# Rendered by nightshift for SharedStorage {st.namespace}/{st.name}; edits are",
        "# overwritten. A forward proxy for CVMFS clients, frontier-squid style.",
        f"http_port {PORT}",
        f"visible_hostname {st.object_name('squid')}.{st.namespace}",
        f"pid_filename {CACHE_DIR}/squid.pid",
        f"coredump_dir {CACHE_DIR}",
        "max_filedescriptors 65536",
        "# No ICMP pinger: pods may not open raw sockets (and need no RTT-based peers).",
        "pinger_enable off",
        "shutdown_lifetime 10 seconds",
        "",
        "# Who may use it: the cluster's pod and node ranges (spec.cvmfs.squid.allowedCIDRs).",
        f"acl nightshift_clients src {' '.join(allowed_cidrs)}",
        "# Where it may fetch from: the hosts and ports of spec.cvmfs.squid.upstreams.",
    ]
    deny_dest = []
    if hosts:
        lines.append(f"acl stratum1_names dstdomain -n {' '.join(hosts)}")
        deny_dest.append("!stratum1_names")
    if ips:
        lines.append(f"acl stratum1_ips dst {' '.join(ips)}")
        deny_dest.append("!stratum1_ips")
    lines += [
        f"acl stratum1_ports port {' '.join(str(p) for p in ports)}",
        "acl cvmfs_methods method GET HEAD",
        "# The cache manager: everything from the pod itself; from the cluster's ranges",
        "# only the counters the operator reads for the status (hit ratio, request rate).",
        f"acl {STATS_ACL} urlpath_regex ^/squid-internal-mgr/counters$",
        "http_access allow localhost manager",
        f"http_access allow manager {STATS_ACL} nightshift_clients",
        "http_access deny manager",
        "http_access deny !cvmfs_methods",
        # Squid ANDs the ACLs of one line: denied when the destination is in neither list.
        f"http_access deny {' '.join(deny_dest)}",
        "http_access deny !stratum1_ports",
        "http_access allow nightshift_clients",
        "http_access deny all",
        "",
        "# Memory: hot objects, up to a size that still serves 10 MB+ objects from RAM.",
        f"cache_mem {cache_mem} MB",
        f"maximum_object_size_in_memory {memory_object_limit_mib(cache_mem)} MB",
        "memory_replacement_policy heap GDSF",
        "# Disk: most of the pod's emptyDir; large objects allowed.",
        f"cache_dir aufs {CACHE_DIR} {disk_mib} 16 256",
        f"maximum_object_size {MAX_OBJECT}",
        "cache_replacement_policy heap LFUDA",
        "",
        "# Many clients missing the same object at once: one upstream fetch for all.",
        "collapsed_forwarding on",
        "# A client that gives up mid-transfer: finish the fetch, the next client wants it.",
        "quick_abort_min -1 KB",
        "",
        "# CVMFS freshness (used when the stratum-1 sends no Cache-Control of its own):",
        "# the manifest and whitelist change on every publish and must be revalidated;",
        "# data objects are content-addressed, so a cached one is never stale: without",
        "# override-lastmod squid would trust a recent Last-Modified (lifetime = its age)",
        "# over the minimum, and revalidate a just-published object seconds later.",
        r"refresh_pattern -i /\.cvmfspublished$ 0 0% 0",
        r"refresh_pattern -i /\.cvmfswhitelist$ 0 0% 1",
        "refresh_pattern -i /data/[0-9a-f][0-9a-f]/ 525600 100% 525600 override-lastmod",
        "refresh_pattern . 0 20% 4320",
        "",
        "# At 10^5 requests a minute an access log costs more than the serving; the",
        "# cache manager's counters are the record. Errors go to the pod's log.",
        "access_log none",
        "cache_store_log none",
        "cache_log /dev/stderr",
        "logfile_rotate 0",
        "",
    ]
    return "\n".join(lines)


def memory_request_mib(memory_cache: str, disk_cache: str) -> int:
    cache_mem = mebibytes(parse_quantity(memory_cache))
    disk_gib = parse_quantity(disk_cache) / 2**30
    return cache_mem + int(disk_gib * INDEX_MIB_PER_GIB) + BASE_MIB


def uses_hpa(st: Storage) -> bool:
    r = _cvmfs(st).squid.replicas
    return r.max > r.min


def render_squid(st: Storage, *, platform: Platform,
                 allowed_cidrs: Sequence[str]) -> list[dict[str, Any]]:
    """ConfigMap, Deployment, Service and (when replicas.max > min) HPA of the squids.

    `allowed_cidrs` is spec.cvmfs.squid.allowedCIDRs, or the cluster's pod and node
    ranges when that is empty (validate.effective_squid_cidrs decides).
    """
    conf = squid_conf(st, allowed_cidrs)
    objs = [_configmap(st, conf), _deployment(st, conf), _service(st, platform, allowed_cidrs)]
    if uses_hpa(st):
        objs.append(_hpa(st))
    return objs


def _meta(st: Storage) -> dict[str, Any]:
    return st.metadata("squid", COMPONENT_SQUID, APP)


def _configmap(st: Storage, conf: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(st),
            "data": {CONF_KEY: conf}}


def _deployment(st: Storage, conf: str) -> dict[str, Any]:
    sq = _cvmfs(st).squid
    mem = memory_request_mib(sq.memory_cache, sq.disk_cache)
    conf_path = f"{CONF_DIR}/{CONF_KEY}"
    container: dict[str, Any] = {
        "name": "squid",
        "image": IMAGE,
        # -z first: make the cache's swap directories on the fresh emptyDir; then squid
        # in the foreground (-N) as the container's main process, for the pod's signals.
        "command": ["/bin/sh", "-c", f"squid -N -z -f {conf_path} && "
                    f"exec squid -N -f {conf_path}"],
        **TERMINATION_MESSAGE,
        "ports": [{"name": "http-proxy", "containerPort": PORT, "protocol": "TCP"}],
        # No CPU limit: throttling a cache adds latency to every client behind it. The
        # disk cache is requested as ephemeral storage: the scheduler (and Karpenter)
        # then put it only on a node whose disk holds it; without the request a 20 Gi
        # cache on a node with a 20 Gi root volume fills it and the kubelet evicts
        # pods for DiskPressure while the storage says Ready.
        "resources": {"requests": {"cpu": sq.cpu, "memory": f"{mem}Mi",
                                   "ephemeral-storage": sq.disk_cache},
                      "limits": {"memory": f"{mem * 2}Mi"}},
        "readinessProbe": {"tcpSocket": {"port": "http-proxy"}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "http-proxy"}, "periodSeconds": 20,
                          "failureThreshold": 3},
        "securityContext": {"runAsUser": PROXY_UID, "runAsGroup": PROXY_UID,
                            "runAsNonRoot": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "config", "mountPath": CONF_DIR, "readOnly": True},
            {"name": "cache", "mountPath": CACHE_DIR},
        ],
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "securityContext": {"fsGroup": PROXY_UID},
        "terminationGracePeriodSeconds": 30,
        "enableServiceLinks": False,
        "volumes": [
            {"name": "config", "configMap": {"name": st.object_name("squid")}},
            {"name": "cache", "emptyDir": {"sizeLimit": sq.disk_cache}},
        ],
        # One squid per node where possible: two on one node share its network card,
        # the resource squids run out of first.
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": st.selector(COMPONENT_SQUID)},
                "topologyKey": "kubernetes.io/hostname"}}]}},
        # The HEP cloud ran one squid stack per availability zone.
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": st.selector(COMPONENT_SQUID)}}],
    }
    if sq.pool:
        pod_spec["affinity"] |= pool_affinity([sq.pool], st)
        pod_spec["tolerations"] = pool_tolerations(st, [sq.pool])
    spec: dict[str, Any] = {
        "selector": {"matchLabels": st.selector(COMPONENT_SQUID)},
        "strategy": {"type": "RollingUpdate",
                     "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "template": {
            "metadata": {"labels": st.labels(COMPONENT_SQUID, APP),
                         "annotations": {names.ANNOTATION_CONFIG_HASH: config_hash(conf)}},
            "spec": pod_spec,
        },
    }
    if not uses_hpa(st):
        # With an HPA the replica count is the HPA's: an applied value would fight it.
        spec["replicas"] = sq.replicas.min
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(st), "spec": spec}


def _service(st: Storage, platform: Platform, allowed: Sequence[str]) -> dict[str, Any]:
    sq = _cvmfs(st).squid
    meta = _meta(st)
    spec: dict[str, Any] = {
        "type": sq.service.type,
        "selector": st.selector(COMPONENT_SQUID),
        "ports": [{"name": "http-proxy", "port": PORT, "targetPort": "http-proxy",
                   "protocol": "TCP"}],
    }
    if sq.service.type == "LoadBalancer":
        # The load balancer's own filter, before squid's ACL sees a packet.
        spec["loadBalancerSourceRanges"] = list(allowed)
        if platform == "aws":
            meta["annotations"] = dict(AWS_LB_ANNOTATIONS)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def _hpa(st: Storage) -> dict[str, Any]:
    sq = _cvmfs(st).squid
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(st),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                               "name": st.object_name("squid")},
            "minReplicas": sq.replicas.min,
            "maxReplicas": sq.replicas.max,
            # CPU utilisation: what metrics-server gives the HPA with no adapter. Squid's
            # CPU follows its request rate; the HEP cloud scaled on network out, which
            # needs a custom metrics adapter here (docs/sharedstorage.md).
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": sq.hpa.target_cpu_utilization}}}],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [
                    {"type": "Percent", "value": 100, "periodSeconds": 60}]},
                "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S, "policies": [
                    {"type": "Pods", "value": 1, "periodSeconds": 300}]},
            },
        },
    }
