"""Which node provisioner a VirtualCluster renders for, from the CRDs installed. Pure."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

CRD_NODEPOOL = "nodepools.karpenter.sh"
CRD_EC2NODECLASS = "ec2nodeclasses.karpenter.k8s.aws"
CRD_KWOKNODECLASS = "kwoknodeclasses.karpenter.kwok.sh"
# The CRD names the I/O layer needs to look for (GET each, or list CRDs once).
WATCHED_CRDS = (CRD_NODEPOOL, CRD_EC2NODECLASS, CRD_KWOKNODECLASS)

STATIC_TAIL = (
    "pools use existing nodes labeled nightshift.io/pool=<pool> (and, to keep other "
    "pods off, tainted nightshift.io/pool=<pool>:NoSchedule); nothing is created and "
    "the limits are not enforced."
)
STATIC_MESSAGE = (
    "No Karpenter found (neither the EC2NodeClass nor the KWOKNodeClass CRD is "
    "installed): static mode: " + STATIC_TAIL
)


@dataclass(frozen=True)
class ProviderChoice:
    provider: Literal["aws", "kwok", "static"]
    # "karpenter" or "static": shown in status.mode.
    mode: Literal["karpenter", "static"]
    message: str
    # Set when spec.provider asks for what the cluster lacks: the VirtualCluster is
    # then not Ready (reason ProviderUnavailable) and nothing is applied.
    error: str | None = None


def detect_provider(installed_crds: Collection[str], override: str = "auto") -> ProviderChoice:
    crds = set(installed_crds)
    has_np = CRD_NODEPOOL in crds
    has_aws = has_np and CRD_EC2NODECLASS in crds
    has_kwok = has_np and CRD_KWOKNODECLASS in crds
    if override == "static":
        return ProviderChoice("static", "static", "spec.provider is static: " + STATIC_TAIL)
    if override == "aws":
        if has_aws:
            return ProviderChoice("aws", "karpenter", "spec.provider is aws: EC2NodeClasses.")
        return ProviderChoice(
            "aws", "karpenter", "",
            error=_missing("aws", [c for c in (CRD_NODEPOOL, CRD_EC2NODECLASS) if c not in crds]),
        )
    if override == "kwok":
        if has_kwok:
            return ProviderChoice("kwok", "karpenter", "spec.provider is kwok: KWOKNodeClasses.")
        return ProviderChoice(
            "kwok", "karpenter", "",
            error=_missing(
                "kwok", [c for c in (CRD_NODEPOOL, CRD_KWOKNODECLASS) if c not in crds]
            ),
        )
    # The local cluster installs the EC2NodeClass CRD beside KWOK's so rendered
    # EC2NodeClasses meet the real schema; only the KWOK CRD says which Karpenter runs.
    if has_kwok:
        return ProviderChoice(
            "kwok", "karpenter", "Karpenter's KWOK provider detected: KWOKNodeClasses."
        )
    if has_aws:
        return ProviderChoice(
            "aws", "karpenter", "Karpenter's AWS provider detected: EC2NodeClasses."
        )
    return ProviderChoice("static", "static", STATIC_MESSAGE)


def _missing(provider: str, crds: list[str]) -> str:
    return (
        f"spec.provider is {provider} but the cluster lacks the CRD(s) {', '.join(crds)}: "
        f"install Karpenter with its {provider} provider, or set spec.provider to auto."
    )

