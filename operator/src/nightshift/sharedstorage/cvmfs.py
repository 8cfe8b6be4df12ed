"""The CVMFS client of a cvmfs SharedStorage: a mounter DaemonSet and the pods' view. Pure.

A privileged pod per node FUSE-mounts each repository at <host dir>/<repo> with
Bidirectional propagation, so the mounts appear on the host; pipeline pods mount the
host dir at /cvmfs with HostToContainer and see /cvmfs/<repo> exactly, as HEP software
expects, including mounts made after they started. Why a DaemonSet and not the CVMFS
CSI driver: docs/sharedstorage.md.
"""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.sharedstorage import squid
from nightshift.sharedstorage.objects import (
    COMPONENT_CVMFS_CLIENT,
    TERMINATION_MESSAGE,
    Storage,
    config_hash,
    mebibytes,
    node_mount_claim,
    pool_affinity,
    pool_tolerations,
)
from nightshift.sharedstorage.spec import Cvmfs
from nightshift.virtualcluster.catalog import parse_quantity

IMAGE = "nightshift-cvmfs-client"
APP = "cvmfs"
MOUNT_ROOT = "/cvmfs"
CACHE_BASE = "/var/lib/cvmfs"
CONFIG_DIR = "/etc/nightshift-cvmfs"
CONFIG_KEY = "default.local"
SCRIPT_KEY = "mount.sh"
# cvmfs2 itself needs a few tens of MiB per mounted repository.
MEMORY_BASE_MIB = 64
MEMORY_PER_REPO_MIB = 32

# Runs in the mounter pod. Stale FUSE mounts (a previous pod that died) answer ENOTCONN
# and would make `mount` fail: lazily unmount them first. On SIGTERM the repositories are
# unmounted so the node keeps no dead mount points.
MOUNT_SH = """\
set -eu
root={root}
repos="{repos}"
cp {config_dir}/{config_key} /etc/cvmfs/default.local
unmount_all() {{
  for r in $repos; do umount -l "$root/$r" 2>/dev/null || true; done
}}
unmount_all
for r in $repos; do
  mkdir -p "$root/$r"
  mount -t cvmfs "$r" "$root/$r"
  echo "mounted $root/$r"
done
trap 'unmount_all; exit 0' TERM INT
while :; do sleep 3600 & wait $! || true; done
"""

# Ready once every repository is a live mount point.
PROBE_SH = """\
for r in {repos}; do grep -q " {root}/$r fuse" /proc/mounts && stat -t {root}/$r/ >/dev/null \
|| exit 1; done
"""


def _cvmfs(st: Storage) -> Cvmfs:
    if st.spec.cvmfs is None:
        raise ValueError(f"SharedStorage {st.namespace}/{st.name} is not of type cvmfs")
    return st.spec.cvmfs


def host_dir(st: Storage) -> str:
    """The node directory under which the repositories are mounted."""
    return st.host_dir("cvmfs")


def client_config(st: Storage) -> str:
    """/etc/cvmfs/default.local: repositories, the squids as proxy, stratum-1 URLs."""
    cv = _cvmfs(st)
    quota_mib = mebibytes(parse_quantity(cv.client.cache_size))
    return "\n".join([
        f"# Rendered by nightshift for SharedStorage {st.namespace}/{st.name}.",
        f"CVMFS_REPOSITORIES={','.join(cv.repositories)}",
        # No DIRECT fallback: every fetch goes through the squids, as the site intends.
        f'CVMFS_HTTP_PROXY="{squid.proxy_url(st)}"',
        f'CVMFS_SERVER_URL="{";".join(cv.squid.upstreams)}"',
        f"CVMFS_QUOTA_LIMIT={quota_mib}",
        f"CVMFS_CACHE_BASE={CACHE_BASE}",
        "CVMFS_SHARED_CACHE=yes",
        # The squids may only reach the listed stratum-1s; the geo API would reorder
        # them by asking a stratum-1 through the proxy, which gains nothing here.
        "CVMFS_USE_GEOAPI=no",
        "",
    ])


def render_cvmfs_client(st: Storage) -> list[dict[str, Any]]:
    """The client's ConfigMap and DaemonSet."""
    cv = _cvmfs(st)
    repos = " ".join(cv.repositories)
    config = client_config(st)
    script = MOUNT_SH.format(root=MOUNT_ROOT, repos=repos, config_dir=CONFIG_DIR,
                             config_key=CONFIG_KEY)
    probe = PROBE_SH.format(root=MOUNT_ROOT, repos=repos)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": st.metadata("cvmfs-client", COMPONENT_CVMFS_CLIENT, APP),
                 "data": {CONFIG_KEY: config, SCRIPT_KEY: script}}
    mem = MEMORY_BASE_MIB + MEMORY_PER_REPO_MIB * len(cv.repositories)
    container: dict[str, Any] = {
        "name": "cvmfs",
        "image": IMAGE,
        "command": ["/bin/sh", f"{CONFIG_DIR}/{SCRIPT_KEY}"],
        **TERMINATION_MESSAGE,
        # FUSE needs /dev/fuse and CAP_SYS_ADMIN; Bidirectional propagation needs
        # privileged outright (the kubelet refuses it otherwise).
        "securityContext": {"privileged": True},
        "resources": {"requests": {"cpu": "100m", "memory": f"{mem}Mi"}},
        # As the Gluster client's: a FUSE stat on a busy node may outlast 1 s.
        "readinessProbe": {"exec": {"command": ["/bin/sh", "-c", probe]},
                           "periodSeconds": 10, "timeoutSeconds": 5},
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "mounts", "mountPath": MOUNT_ROOT, "mountPropagation": "Bidirectional"},
            {"name": "cache", "mountPath": CACHE_BASE},
        ],
    }
    pools = cv.client.pools
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": st.metadata("cvmfs-client", COMPONENT_CVMFS_CLIENT, APP),
        "spec": {
            "selector": {"matchLabels": st.selector(COMPONENT_CVMFS_CLIENT)},
            # OnDelete: restarting a mounter pulls /cvmfs from under running tasks. A new
            # config reaches a node when its mounter pod is deleted (node idle or new).
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": st.labels(COMPONENT_CVMFS_CLIENT, APP),
                             "annotations": {
                                 names.ANNOTATION_CONFIG_HASH: config_hash(config, script)}},
                "spec": {
                    "containers": [container],
                    "affinity": pool_affinity(pools, st),
                    "tolerations": pool_tolerations(st, pools),
                    "terminationGracePeriodSeconds": 30,
                    "enableServiceLinks": False,
                    "volumes": [
                        {"name": "config", "configMap": {"name": st.object_name("cvmfs-client")}},
                        {"name": "mounts", "hostPath": {"path": host_dir(st),
                                                        "type": "DirectoryOrCreate"}},
                        # On the node so a restarted mounter finds its cache warm.
                        {"name": "cache", "hostPath": {"path": st.host_dir("cvmfs-cache"),
                                                       "type": "DirectoryOrCreate"}},
                    ],
                },
            },
        },
    }
    return [configmap, daemonset,
            *node_mount_claim(st, "cvmfs", COMPONENT_CVMFS_CLIENT, APP, host_dir(st),
                              read_only=True)]


def client_claim_name(st: Storage) -> str:
    return st.object_name("cvmfs-client")


def pod_volume(st: Storage) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount) that give a pipeline pod /cvmfs/<repo> for every repository:
    the clients' claim (objects.node_mount_claim), read-only, HostToContainer."""
    _cvmfs(st)
    vol_name = f"nightshift-cvmfs-{st.name}"[:63].rstrip("-")
    volume = {"name": vol_name, "persistentVolumeClaim": {
        "claimName": client_claim_name(st), "readOnly": True}}
    mount = {"name": vol_name, "mountPath": MOUNT_ROOT, "readOnly": True,
             "mountPropagation": "HostToContainer"}
    return volume, mount
