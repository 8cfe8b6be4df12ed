"""VirtualCluster spec models (group nightshift.io, version v1alpha1).

Mirrors crds/virtualcluster.yaml. What CEL can check lives in the CRD; what it cannot
(instance types against the catalog, the detected provider's needs) lives in
nightshift.virtualcluster.validate and surfaces as an Invalid condition.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nightshift.api.billing import DEFAULT_BILLING, Billing
from nightshift.api.models import Spec

PoolClass = Literal["compute", "memory", "general", "storage", "cluster-compute", "gpu"]
Capacity = Literal["spot", "on-demand", "spot-then-on-demand"]
Arch = Literal["amd64", "arm64"]
ProviderName = Literal["auto", "aws", "kwok", "static"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

POOL_CLASSES: tuple[PoolClass, ...] = (
    "compute", "memory", "general", "storage", "cluster-compute", "gpu",
)


class Taint(Spec):
    key: str
    value: str | None = None
    effect: TaintEffect = "NoSchedule"


class Pool(Spec):
    name: str
    class_: PoolClass = Field(alias="class")
    families: list[str] = []
    instance_types: list[str] = []
    # A seed's instance type (legacy.LEGACY): this class's current types at least as large.
    like: str | None = None
    # A list so that one pool can take Graviton and x86 instances alike; the images
    # must then be multi-arch.
    arch: list[Arch] = ["amd64"]
    capacity: Capacity = "spot"
    # Whole cores: the spending cap that matters most, and what CEL checks > 0.
    max_cpu: int | None = Field(default=None, alias="maxCPU")
    max_memory: str | None = None
    max_nodes: int | None = None
    local_disk: Literal["raid0"] | None = None
    placement: Literal["cluster"] | None = None
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    consolidate_after: str = "2m"
    expire_after: str | None = None


class SubnetSelectorTerm(Spec):
    tags: dict[str, str] = {}
    id: str | None = None


class SecurityGroupSelectorTerm(Spec):
    tags: dict[str, str] = {}
    id: str | None = None
    name: str | None = None


class AmiSelectorTerm(Spec):
    tags: dict[str, str] = {}
    id: str | None = None
    name: str | None = None
    owner: str | None = None
    ssm_parameter: str | None = None


class Ebs(Spec):
    volume_size: str | None = None
    volume_type: str | None = None
    iops: int | None = None
    throughput: int | None = None
    encrypted: bool | None = None
    delete_on_termination: bool | None = None
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    snapshot_id: str | None = Field(default=None, alias="snapshotID")


class BlockDeviceMapping(Spec):
    device_name: str
    root_volume: bool = False
    ebs: Ebs


class KwokSettings(Spec):
    node_registration_delay: str | None = None


class NodeClass(Spec):
    role: str | None = None
    instance_profile: str | None = None
    subnet_selector_terms: list[SubnetSelectorTerm] = []
    security_group_selector_terms: list[SecurityGroupSelectorTerm] = []
    ami_alias: str | None = None
    ami_selector_terms: list[AmiSelectorTerm] = []
    ami_family: str | None = None
    tags: dict[str, str] = {}
    block_device_mappings: list[BlockDeviceMapping] = []
    kwok: KwokSettings | None = None


class VirtualClusterSpec(Spec):
    pools: list[Pool]
    node_class: NodeClass = NodeClass()
    provider: ProviderName = "auto"
    billing: Billing = DEFAULT_BILLING


DEFAULT_AMI_ALIAS = "al2023@latest"
