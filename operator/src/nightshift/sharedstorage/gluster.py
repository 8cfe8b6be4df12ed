"""The GlusterFS servers, clients and volume commands of a glusterfs SharedStorage. Pure.

Servers: a StatefulSet of spec.glusterfs.servers glusterd pods on the storage pool, one
per node, on the host network (bricks listen on the node's ports and are named by node
address). A StatefulSet and not a DaemonSet: Karpenter launches nodes for pending pods
but never for a DaemonSet, so only pods that ask for nodes make the storage pool
exist; and the brick count must be known to check replica against it.

Clients: a privileged DaemonSet on the client pools' nodes FUSE-mounts the volume at a
host directory with Bidirectional propagation; pipeline pods mount that directory with
HostToContainer. The client also runs on the host network: NUFA finds "the local
brick" by comparing brick addresses with the client's own, which inside a pod network
namespace would never match.

The volume is created by a Job (glustervolume.volume_job) that runs the commands of
`volume_commands`, a pure function of the spec and the server pods the reconcile
observed, against server pod 0's glusterd. glusterd serves its full CLI (create, start,
set) only on its unix socket, never over TCP (there it answers read-only queries), so
the servers keep that socket in a host directory and the Job runs on server 0's node
with the same directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nightshift.api import names
from nightshift.sharedstorage.objects import (
    COMPONENT_GLUSTER_CLIENT,
    COMPONENT_GLUSTER_SERVER,
    TERMINATION_MESSAGE,
    Storage,
    config_hash,
    node_mount_claim,
    pool_affinity,
    pool_tolerations,
)
from nightshift.sharedstorage.spec import Glusterfs

IMAGE = "nightshift-gluster"
APP = "glusterfs"
GLUSTERD_PORT = 24007
BRICKS_IN_POD = "/bricks"
CLIENT_MOUNT_IN_POD = "/mnt/gluster"
CLIENT_LOG = "/var/log/glusterfs/client.log"
CLIENT_CONTAINER = "glusterfs"
# Why the client's last mount failed, while it has not mounted (its readiness probe
# prints it).
CLIENT_WHY = "/run/nightshift-mount.why"
GLUSTER = ["gluster", "--mode=script"]
# glusterd's runtime directory: its CLI socket (/var/run/glusterd.socket; /var/run is
# /run in Debian), pid files and brick sockets. A host directory per storage, so the
# volume Job on the same node reaches the socket.
RUN_IN_POD = "/run"

# The volfile servers go to mount.glusterfs as addresses, resolved at each mount: it
# drops any name longer than 63 characters (its HOST_NAME_MAX check), which a
# Service's cluster DNS name easily is, and then either refuses to mount ("No valid
# servers") or, for backup-volfile-servers, tries a server called "SyntaxOK" (its
# parser's status word). Several servers in the source fail over in order.
CLIENT_SH = """\
set -u
dir={mount}
log={log}
names="{servers}"
# IPv4 (an IPv6 address's colons would end the server list early), else the name.
addresses() {{
  for h in $names; do
    a=$(getent ahostsv4 "$h" | awk '{{print $1; exit}}'); echo "${{a:-$h}}"
  done | paste -sd, -
}}
# $dir is the node's directory (a Bidirectional hostPath mount): unmount only the
# glusterfs on top of it, never the bind itself, or the next mount stays in this pod.
unmount() {{
  if grep -q " $dir fuse.glusterfs " /proc/mounts; then umount -l "$dir"; fi
}}
# mount.glusterfs says only "Mount failed"; the client's own log says why (a server
# that does not answer, a port a network policy blocks): its last errors, once each.
said=
why() {{
  [ -r "$log" ] || return 0
  last=$(grep ' E \\[' "$log" | tail -n 2 | cut -c1-300)
  if [ -n "$last" ] && [ "$last" != "$said" ]; then echo "$last"; said=$last; fi
}}
# Each failure leaves one line in {why_file}: glusterfs' last error without its date,
# source place and translator (short: a status quotes at most 240 characters, and a
# list of unresolved server names alone can be longer). The readiness probe prints it,
# so the kubelet's Unhealthy event carries it and the storage's status quotes it
# (observe.not_mounted). The client itself goes on trying every 5 s, so a volume comes
# back within seconds of its servers, which a crash loop's back-off (up to 5 min) would
# not.
# Before every try: a try that failed after FUSE mounted (its volume file not served
# yet) can leave a dead mount on $dir, which mount.glusterfs then takes for a missing
# mount point ("Mount point does not exist") on every later try.
remount() {{
  until unmount; list=$(addresses) && mount -t glusterfs -o "log-file=$log" "$list:/{volume}" "$dir"
  do
    why
    last=$([ -r "$log" ] && grep ' E \\[' "$log" | tail -n 1 | sed -E \\
      's/^\\[[^]]*\\] E //; s/^(\\[[^]]*\\] )+//; s/^[0-9]+-[^ :]*: //' | cut -c1-200)
    echo "volume {volume} does not mount: ${{last:-glusterfs logged no error (servers $list)}}" \\
      > {why_file}
    echo "volume {volume} not mountable yet (servers $list); retrying in 5 s"; sleep 5
  done
  # Pipeline pods run as non-root users (stages[].runAsUser): the volume's root is
  # theirs to create directories in, as /tmp is (sticky: not to remove others').
  chmod 1777 "$dir" || echo "could not chmod $dir"
  rm -f {why_file}
  echo "mounted {volume} at $dir"
}}
trap 'unmount; exit 0' TERM INT
remount
# A dead FUSE process leaves a mount point answering ENOTCONN: mount again.
while :; do
  sleep 10 & wait $! || true
  stat -t "$dir" >/dev/null 2>&1 || remount
done
"""

PROBE_SH = ('grep -q " {mount} fuse.glusterfs" /proc/mounts && stat -t {mount} >/dev/null '
            '|| {{ cat {why_file} 2>/dev/null; exit 1; }}')


@dataclass(frozen=True)
class ServerPod:
    """A gluster server pod as observed: its StatefulSet name, host address, readiness
    and node (where the volume Job must run to reach its glusterd)."""

    name: str
    ip: str
    ready: bool
    node: str = ""


@dataclass(frozen=True)
class Exec:
    """A command to run in a pod (kubectl exec or the API's exec subresource)."""

    pod: str
    argv: list[str]


def _gluster(st: Storage) -> Glusterfs:
    if st.spec.glusterfs is None:
        raise ValueError(f"SharedStorage {st.namespace}/{st.name} is not of type glusterfs")
    return st.spec.glusterfs


def volume_name(st: Storage) -> str:
    # Each SharedStorage has its own trusted pool of servers: its name is unique there.
    return st.name


def server_name(st: Storage) -> str:
    return st.object_name("gluster")


def service_host(st: Storage) -> str:
    return f"{server_name(st)}.{st.namespace}.svc.cluster.local"


def client_host_dir(st: Storage) -> str:
    return st.host_dir("gluster")


def brick_host_dir(st: Storage) -> str:
    return f"{_gluster(st).brick_path.rstrip('/')}/{st.namespace}-{st.name}"


def run_host_dir(st: Storage) -> str:
    return st.host_dir("glusterd-run")


def volume_job_name(st: Storage) -> str:
    return st.object_name("gluster-volume")


def brick_dirs(st: Storage) -> list[str]:
    return [f"{BRICKS_IN_POD}/brick{b}" for b in range(_gluster(st).bricks_per_node)]


def client_claim_name(st: Storage) -> str:
    return st.object_name("gluster-client")


def render_gluster(st: Storage) -> list[dict[str, Any]]:
    """Headless Service and StatefulSet of the servers; ConfigMap and DaemonSet of the
    clients; the PersistentVolume and claim pipeline pods see the mount through."""
    return [_service(st), _statefulset(st), *_clients(st),
            *node_mount_claim(st, "gluster", COMPONENT_GLUSTER_CLIENT, APP,
                              client_host_dir(st), read_only=False)]


def _service(st: Storage) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": st.metadata("gluster", COMPONENT_GLUSTER_SERVER, APP),
        "spec": {
            # Headless: per-pod DNS names for the StatefulSet, and the clients' volfile
            # server name resolves to every ready server's node address.
            "clusterIP": "None",
            "selector": st.selector(COMPONENT_GLUSTER_SERVER),
            "ports": [{"name": "glusterd", "port": GLUSTERD_PORT, "protocol": "TCP"}],
        },
    }


def _statefulset(st: Storage) -> dict[str, Any]:
    g = _gluster(st)
    # The runtime directory outlives the pod: a dead glusterd's socket and pid files
    # would make the new one think its bricks still run.
    start = (f"rm -rf {RUN_IN_POD}/glusterd.socket {RUN_IN_POD}/glusterd.pid "
             f"{RUN_IN_POD}/gluster && mkdir -p {' '.join(brick_dirs(st))} && "
             "exec glusterd -N --log-file=/dev/stderr")
    affinity = pool_affinity([g.pool], st)
    # One glusterd per node, across every storage: they all want the node's port 24007.
    affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {
            names.LABEL_COMPONENT: COMPONENT_GLUSTER_SERVER,
            names.LABEL_MANAGED_BY: names.MANAGED_BY}},
        "namespaceSelector": {},
        "topologyKey": "kubernetes.io/hostname",
    }]}
    container = {
        "name": "glusterd",
        "image": IMAGE,
        "command": ["/bin/sh", "-c", start],
        **TERMINATION_MESSAGE,
        "ports": [{"name": "glusterd", "containerPort": GLUSTERD_PORT, "protocol": "TCP"}],
        # Bricks keep their metadata in trusted.* extended attributes: CAP_SYS_ADMIN.
        "securityContext": {"privileged": True},
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
        "readinessProbe": {"tcpSocket": {"port": GLUSTERD_PORT}, "periodSeconds": 5},
        "volumeMounts": [
            {"name": "state", "mountPath": "/var/lib/glusterd"},
            {"name": "bricks", "mountPath": BRICKS_IN_POD},
            {"name": "logs", "mountPath": "/var/log/glusterfs"},
            {"name": "run", "mountPath": RUN_IN_POD},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": st.metadata("gluster", COMPONENT_GLUSTER_SERVER, APP),
        "spec": {
            "serviceName": server_name(st),
            "replicas": g.servers,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": st.selector(COMPONENT_GLUSTER_SERVER)},
            "template": {
                "metadata": {
                    "labels": st.labels(COMPONENT_GLUSTER_SERVER, APP),
                    # A brick's node going away is data gone (distribute) or a copy gone.
                    "annotations": {names.ANNOTATION_DO_NOT_DISRUPT: "true"},
                },
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "containers": [container],
                    "affinity": affinity,
                    "tolerations": pool_tolerations(st, [g.pool]),
                    "enableServiceLinks": False,
                    # /var/run/secrets would land in the host runtime directory.
                    "automountServiceAccountToken": False,
                    "volumes": [
                        # Peer identity and volume definitions outlive the pod, so a
                        # restarted server rejoins its pool with its bricks.
                        {"name": "state", "hostPath": {"path": st.host_dir("glusterd"),
                                                       "type": "DirectoryOrCreate"}},
                        {"name": "bricks", "hostPath": {"path": brick_host_dir(st),
                                                        "type": "DirectoryOrCreate"}},
                        {"name": "logs", "emptyDir": {}},
                        {"name": "run", "hostPath": {"path": run_host_dir(st),
                                                     "type": "DirectoryOrCreate"}},
                    ],
                },
            },
        },
    }


def _clients(st: Storage) -> list[dict[str, Any]]:
    g = _gluster(st)
    servers = " ".join([service_host(st), *(f"{server_name(st)}-{i}.{service_host(st)}"
                                            for i in range(g.servers))])
    script = CLIENT_SH.format(mount=CLIENT_MOUNT_IN_POD, servers=servers,
                              volume=volume_name(st), log=CLIENT_LOG, why_file=CLIENT_WHY)
    probe = PROBE_SH.format(mount=CLIENT_MOUNT_IN_POD, why_file=CLIENT_WHY)
    container = {
        "name": CLIENT_CONTAINER,
        "image": IMAGE,
        "command": ["/bin/sh", "/etc/nightshift-gluster/mount.sh"],
        **TERMINATION_MESSAGE,
        "securityContext": {"privileged": True},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        # A FUSE stat on a busy node, plus the runtime's exec, can take longer than the
        # 1-s default: a probe timed out is not a volume not mounted.
        "readinessProbe": {"exec": {"command": ["/bin/sh", "-c", probe]}, "periodSeconds": 10,
                           "timeoutSeconds": 5},
        "volumeMounts": [
            {"name": "script", "mountPath": "/etc/nightshift-gluster", "readOnly": True},
            {"name": "mount", "mountPath": CLIENT_MOUNT_IN_POD,
             "mountPropagation": "Bidirectional"},
        ],
    }
    pools = g.clients.pools
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": st.metadata("gluster-client", COMPONENT_GLUSTER_CLIENT, APP),
         "data": {"mount.sh": script}},
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": st.metadata("gluster-client", COMPONENT_GLUSTER_CLIENT, APP),
            "spec": {
                "selector": {"matchLabels": st.selector(COMPONENT_GLUSTER_CLIENT)},
                # As for CVMFS: a restarted client pulls the volume from running tasks.
                "updateStrategy": {"type": "OnDelete"},
                "template": {
                    "metadata": {"labels": st.labels(COMPONENT_GLUSTER_CLIENT, APP),
                                 "annotations": {
                                     names.ANNOTATION_CONFIG_HASH: config_hash(script)}},
                    "spec": {
                        "hostNetwork": True,
                        "dnsPolicy": "ClusterFirstWithHostNet",
                        "containers": [container],
                        "affinity": pool_affinity(pools, st),
                        "tolerations": pool_tolerations(st, pools),
                        "enableServiceLinks": False,
                        "volumes": [
                            {"name": "script", "configMap": {
                                "name": st.object_name("gluster-client")}},
                            {"name": "mount", "hostPath": {"path": client_host_dir(st),
                                                           "type": "DirectoryOrCreate"}},
                        ],
                    },
                },
            },
        },
    ]


def bricks(st: Storage, ips: Sequence[str]) -> list[str]:
    """host:/path of every brick, interleaved across servers (b0 of each server, then
    b1, ...), so any `replica` consecutive bricks (one replica set) sit on `replica`
    different servers as long as replica <= servers."""
    return [f"{ip}:{d}" for d in brick_dirs(st) for ip in ips]


def volume_commands(st: Storage, servers: Sequence[ServerPod]) -> list[Exec]:
    """The commands that make and start the volume, all run in server pod 0.

    [] until every one of spec.servers pods is ready: a volume over fewer bricks would
    have to be grown and rebalanced later, so nothing is half created. The reconcile
    runs them once `gluster volume info <volume>` says the volume does not exist; a
    peer probe of a peer already in the pool succeeds, so re-running after a partial
    failure is safe up to the create.
    """
    g = _gluster(st)
    by_name = {s.name: s for s in servers}
    ordered = [by_name.get(f"{server_name(st)}-{i}") for i in range(g.servers)]
    if any(s is None or not s.ready or not s.ip for s in ordered):
        return []
    pods = [s for s in ordered if s is not None]
    first = pods[0].name
    vol = volume_name(st)
    out = [Exec(first, [*GLUSTER, "peer", "probe", s.ip]) for s in pods[1:]]
    create = [*GLUSTER, "volume", "create", vol]
    if g.replica:
        create += ["replica", str(g.replica)]
    # force: bricks on the node's root file system (no instance store) are refused
    # without it; the layout checks force also skips are made by validate and CEL.
    create += [*bricks(st, [s.ip for s in pods]), "force"]
    out.append(Exec(first, create))
    if g.layout == "nufa":
        out.append(Exec(first, [*GLUSTER, "volume", "set", vol, "cluster.nufa", "on"]))
    out.append(Exec(first, [*GLUSTER, "volume", "start", vol]))
    return out


def pod_volume(st: Storage, mount_path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount) that show the mounted volume at `mount_path` in a pod:
    the clients' claim, HostToContainer (a remount by the client reaches the pod)."""
    _gluster(st)
    vol_name = f"nightshift-gluster-{st.name}"[:63].rstrip("-")
    volume = {"name": vol_name, "persistentVolumeClaim": {"claimName": client_claim_name(st)}}
    mount = {"name": vol_name, "mountPath": mount_path, "mountPropagation": "HostToContainer"}
    return volume, mount


def endpoint(st: Storage) -> str:
    return f"glusterfs://{service_host(st)}/{volume_name(st)}"
