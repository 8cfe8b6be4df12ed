"""SharedStorage spec models (group nightshift.io, version v1alpha1).

Mirrors crds/sharedstorage.yaml. What CEL can check lives in the CRD; what it cannot
(pools of the named VirtualCluster, StorageClasses, the cluster's address ranges) lives
in nightshift.sharedstorage.validate and surfaces as an Invalid condition. Defaults
here equal the CRD's, so a model built from an object stored before a default existed
renders the same as one the API server defaulted.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nightshift.api.models import Spec

StorageType = Literal["nfs", "glusterfs", "s3", "cvmfs"]
STORAGE_TYPES: tuple[StorageType, ...] = ("nfs", "glusterfs", "s3", "cvmfs")
ReclaimPolicy = Literal["Retain", "Delete"]
ServiceType = Literal["LoadBalancer", "NodePort", "ClusterIP"]
SERVICE_TYPES: tuple[ServiceType, ...] = ("LoadBalancer", "NodePort", "ClusterIP")

DEFAULT_NFS_MOUNT_OPTIONS = ["nfsvers=4.1", "noatime"]
# Where Karpenter's instanceStorePolicy RAID0 mounts the array on the EKS AMIs (the same
# root the runner's local-disk scratch uses).
LOCAL_DISK_ROOT = "/mnt/k8s-disks/0"
DEFAULT_BRICK_PATH = f"{LOCAL_DISK_ROOT}/nightshift/gluster"


class Pvc(Spec):
    # Optional here so that validate can name the field; the CRD requires it.
    size: str | None = None
    storage_class: str | None = None


class NfsBacking(Spec):
    pvc: Pvc | None = None
    local_disk: bool = False


class ExportOptions(Spec):
    access_type: Literal["RW", "RO"] = "RW"
    squash: Literal["none", "root", "all"] = "none"


class NfsClients(Spec):
    pools: list[str]
    mount_options: list[str] = Field(default_factory=lambda: list(DEFAULT_NFS_MOUNT_OPTIONS))


class Nfs(Spec):
    server: Literal["dedicated", "colocated"] = "dedicated"
    pool: str
    backing: NfsBacking
    export_options: ExportOptions = ExportOptions()
    clients: NfsClients


class GlusterClients(Spec):
    pools: list[str]


class Glusterfs(Spec):
    layout: Literal["nufa", "distribute"] = "distribute"
    replica: int | None = None
    pool: str
    servers: int = 1
    bricks_per_node: int = 1
    brick_path: str = DEFAULT_BRICK_PATH
    clients: GlusterClients


class S3Cache(Spec):
    size: str = "50Gi"


class S3(Spec):
    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    credentials_secret: str | None = None
    cache: S3Cache = S3Cache()


class CvmfsClient(Spec):
    cache_size: str = "4Gi"
    pools: list[str]


class Replicas(Spec):
    min: int = 1
    max: int = 1


class SquidService(Spec):
    type: ServiceType = "ClusterIP"


class SquidHpa(Spec):
    target_cpu_utilization: int = Field(default=70, alias="targetCPUUtilization")


class Squid(Spec):
    replicas: Replicas = Replicas()
    memory_cache: str = "256Mi"
    disk_cache: str = "20Gi"
    cpu: str = "1"
    # None: any node without a pool taint (e.g. the cluster's system nodes).
    pool: str | None = None
    upstreams: list[str]
    allowed_cidrs: list[str] = Field(default_factory=list, alias="allowedCIDRs")
    service: SquidService = SquidService()
    hpa: SquidHpa = SquidHpa()


class Cvmfs(Spec):
    repositories: list[str]
    client: CvmfsClient
    squid: Squid


class SharedStorageSpec(Spec):
    type: StorageType
    virtual_cluster: str | None = None
    reclaim_policy: ReclaimPolicy = "Retain"
    nfs: Nfs | None = None
    glusterfs: Glusterfs | None = None
    s3: S3 | None = None
    cvmfs: Cvmfs | None = None


Phase = Literal["Pending", "Ready", "Failed", "Deleting"]
PHASES: tuple[Phase, ...] = ("Pending", "Ready", "Failed", "Deleting")
