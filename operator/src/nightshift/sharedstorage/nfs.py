"""The NFS server of an nfs SharedStorage and its clients' volume. Pure.

Server: nfs-ganesha, a user-space NFS server, so it needs no kernel nfsd on the node
(and no `nfsd` module, which EKS AMIs and this machine's VM kernel do not load for
pods). One Deployment replica pinned to spec.nfs.pool: dedicated, a node of its own
(a required anti-affinity against every pipeline pod); colocated, a compute node
that pipeline pods share. The export is NFSv4.1 over TCP from a PVC or the node's
local disk.

Clients: the kubelet mounts NFS itself, through the node kernel's NFS client, from a
PersistentVolume that points at the server's Service ClusterIP (the host resolves no
cluster DNS names), bound to a claim in the storage's namespace that PipelineRuns use.
"""

from __future__ import annotations

from typing import Any

from nightshift.api import names
from nightshift.pipelinerun.spec import PvcStorage, StorageRef
from nightshift.sharedstorage.objects import (
    COMPONENT_NFS_CLIENT,
    COMPONENT_NFS_SERVER,
    TERMINATION_MESSAGE,
    Storage,
    config_hash,
    pool_affinity,
    pool_tolerations,
)
from nightshift.sharedstorage.spec import LOCAL_DISK_ROOT, Nfs

IMAGE = "nightshift-nfs-ganesha"
APP = "nfs-ganesha"
PORT = 2049
EXPORT_PATH = "/export"
# The NFSv4 pseudo path clients mount; the PV's nfs.path.
PSEUDO_PATH = "/data"
CONF_DIR = "/etc/ganesha/nightshift"
CONF_KEY = "ganesha.conf"
LOCAL_DISK_DIR = f"{LOCAL_DISK_ROOT}/nightshift/nfs"
# NFS does not enforce a PersistentVolume's capacity; with localDisk backing there is
# no size to state, so the PV and its claim carry this nominal one.
NOMINAL_CAPACITY = "1Gi"
SQUASH = {"none": "No_Root_Squash", "root": "Root_Squash", "all": "All_Squash"}


def _nfs(st: Storage) -> Nfs:
    if st.spec.nfs is None:
        raise ValueError(f"SharedStorage {st.namespace}/{st.name} is not of type nfs")
    return st.spec.nfs


def local_disk_dir(st: Storage) -> str:
    """The export's node directory under `backing.localDisk`."""
    return f"{LOCAL_DISK_DIR}/{st.namespace}-{st.name}"


def data_claim_name(st: Storage) -> str:
    return st.object_name("nfs-data")


def client_claim_name(st: Storage) -> str:
    return st.object_name("nfs-client")


def ganesha_conf(st: Storage) -> str:
    nfs = _nfs(st)
    opts = nfs.export_options
    return f"""\
# Rendered by nightshift for SharedStorage {st.namespace}/{st.name}; edits are overwritten.
NFS_CORE_PARAM {{
    # NFSv4 only: no rpcbind, no lock manager, no quota daemon, one TCP port.
    Protocols = 4;
    NFS_Port = {PORT};
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
}}
NFSV4 {{
    # Workflow files are written once and never locked: skip the 90 s grace period a
    # restarted server would otherwise hold every client in.
    Graceless = true;
    # 4.0 too: user-space clients (libnfs 4.0, nfs-ls/nfs-cp) speak only 4.0; the
    # kernel clients mount 4.1 (the PersistentVolume's mountOptions).
    Minor_Versions = 0, 1, 2;
}}
EXPORT {{
    Export_Id = 1;
    Path = "{EXPORT_PATH}";
    Pseudo = "{PSEUDO_PATH}";
    Access_Type = {opts.access_type};
    Squash = {SQUASH[opts.squash]};
    SecType = sys;
    Protocols = 4;
    Transports = TCP;
    FSAL {{
        Name = VFS;
    }}
}}
"""


def render_nfs_server(st: Storage) -> list[dict[str, Any]]:
    """ConfigMap, data claim (PVC backing), Deployment and Service of the server."""
    nfs = _nfs(st)
    conf = ganesha_conf(st)
    objs: list[dict[str, Any]] = [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": st.metadata("nfs", COMPONENT_NFS_SERVER, APP),
        "data": {CONF_KEY: conf},
    }]
    pvc = nfs.backing.pvc
    if pvc is not None:
        if not pvc.size:
            raise ValueError("spec.nfs.backing.pvc.size is required")
        claim: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": pvc.size}},
        }
        if pvc.storage_class:
            claim["storageClassName"] = pvc.storage_class
        # Retain: no owner, so deleting the SharedStorage leaves the claim (and the data)
        # for a new SharedStorage of the same name to find.
        objs.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": st.metadata("nfs-data", COMPONENT_NFS_SERVER, APP,
                                    owned=st.spec.reclaim_policy == "Delete"),
            "spec": claim,
        })
        data_volume: dict[str, Any] = {"name": "export", "persistentVolumeClaim": {
            "claimName": data_claim_name(st)}}
    else:
        data_volume = {"name": "export", "hostPath": {
            "path": local_disk_dir(st), "type": "DirectoryOrCreate"}}
    objs.append(_deployment(st, nfs, conf, data_volume))
    objs.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": st.metadata("nfs", COMPONENT_NFS_SERVER, APP),
        "spec": {
            "type": "ClusterIP",
            "selector": st.selector(COMPONENT_NFS_SERVER),
            "ports": [{"name": "nfs", "port": PORT, "targetPort": "nfs", "protocol": "TCP"}],
        },
    })
    return objs


def _placement(st: Storage, nfs: Nfs) -> dict[str, Any]:
    affinity = pool_affinity([nfs.pool], st)
    if nfs.server == "dedicated":
        # The scheduler (and Karpenter) honour an existing pod's required anti-affinity
        # for pods coming later too, so this one term keeps pipeline pods of any
        # namespace off the server's node and the server off a node running them.
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [
                {"key": names.LABEL_RUN, "operator": "Exists"}]},
            "namespaceSelector": {},
            "topologyKey": "kubernetes.io/hostname",
        }]}
    return affinity


def _deployment(st: Storage, nfs: Nfs, conf: str,
                data_volume: dict[str, Any]) -> dict[str, Any]:
    container = {
        "name": "ganesha",
        "image": IMAGE,
        # The export's root writable by every user, sticky as /tmp (pipeline pods run as
        # non-root users, stages[].runAsUser); ganesha in the foreground (-F) as the
        # container's main process, logging to the pod's log.
        "command": ["/bin/sh", "-c", "mkdir -p /var/run/ganesha /var/lib/nfs/ganesha && "
                    f"chmod 1777 {EXPORT_PATH} && "
                    f"exec ganesha.nfsd -F -L /dev/stderr -f {CONF_DIR}/{CONF_KEY} "
                    "-p /var/run/ganesha/ganesha.pid"],
        **TERMINATION_MESSAGE,
        "ports": [{"name": "nfs", "containerPort": PORT, "protocol": "TCP"}],
        # The VFS backend serves files by handle (open_by_handle_at), which needs
        # CAP_DAC_READ_SEARCH; nothing else beyond the runtime's defaults.
        "securityContext": {"capabilities": {"add": ["DAC_READ_SEARCH"]}},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
        "readinessProbe": {"tcpSocket": {"port": "nfs"}, "periodSeconds": 5},
        "volumeMounts": [
            {"name": "config", "mountPath": CONF_DIR, "readOnly": True},
            {"name": "export", "mountPath": EXPORT_PATH},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": st.metadata("nfs", COMPONENT_NFS_SERVER, APP),
        "spec": {
            "replicas": 1,
            # Never two servers: the claim attaches to one node, and two ganeshas on one
            # directory would each grant the other's clients conflicting state.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": st.selector(COMPONENT_NFS_SERVER)},
            "template": {
                "metadata": {
                    "labels": st.labels(COMPONENT_NFS_SERVER, APP),
                    "annotations": {
                        names.ANNOTATION_CONFIG_HASH: config_hash(conf),
                        # Every client stalls while the server moves: Karpenter must not
                        # consolidate its node away.
                        names.ANNOTATION_DO_NOT_DISRUPT: "true",
                    },
                },
                "spec": {
                    "containers": [container],
                    "affinity": _placement(st, nfs),
                    "tolerations": pool_tolerations(st, [nfs.pool]),
                    "enableServiceLinks": False,
                    "volumes": [
                        {"name": "config", "configMap": {"name": st.object_name("nfs")}},
                        data_volume,
                    ],
                },
            },
        },
    }


def render_nfs_client(st: Storage, server_ip: str) -> list[dict[str, Any]]:
    """The clients' PersistentVolume (cluster-scoped) and claim, given the Service's
    ClusterIP that the reconcile read back after creating the Service."""
    nfs = _nfs(st)
    if not server_ip:
        raise ValueError("the NFS Service has no ClusterIP yet")
    pvc = nfs.backing.pvc
    capacity = pvc.size if pvc is not None and pvc.size else NOMINAL_CAPACITY
    pv_name = st.cluster_name("nfs")
    pv_labels = {
        **st.labels(COMPONENT_NFS_CLIENT, APP),
        names.LABEL_STORAGE_NAMESPACE: st.namespace,
    }
    source: dict[str, Any] = {"server": server_ip, "path": PSEUDO_PATH}
    if nfs.export_options.access_type == "RO":
        source["readOnly"] = True
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        # Cluster-scoped: no ownerReference to a namespaced owner; the labels say whose
        # it is and the storage's deletion removes it.
        "metadata": {"name": pv_name, "labels": pv_labels},
        "spec": {
            "capacity": {"storage": capacity},
            "accessModes": ["ReadWriteMany"],
            # Deleting the PV never touches the server's files; it is only a pointer.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": list(nfs.clients.mount_options),
            "nfs": source,
            # Pre-bound: no other claim can take it.
            "claimRef": {"namespace": st.namespace, "name": client_claim_name(st)},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": st.metadata("nfs-client", COMPONENT_NFS_CLIENT, APP),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": capacity}},
        },
    }
    return [pv, claim]


def storage_ref(st: Storage) -> StorageRef:
    """The PipelineRun storage block for this export: the clients' claim."""
    _nfs(st)
    return StorageRef(name=st.name, pvc=PvcStorage(claim_name=client_claim_name(st)))


def endpoint(server_ip: str) -> str:
    return f"nfs://{server_ip}:{PSEUDO_PATH}"
