"""What the CRD's CEL rules cannot check about a VirtualCluster. Pure.

CEL sees one object: it cannot know the instance catalog or which provider the
cluster runs. Each problem names the field path and the fix; the reconciler joins
them into the Invalid condition and applies nothing for an invalid VirtualCluster.
Rules CEL also enforces are repeated here so that an object admitted by an older CRD
still gets a clear message.
"""

from __future__ import annotations

from nightshift.api.problems import Problem
from nightshift.virtualcluster.catalog import (
    CLASS_CATEGORIES,
    InstanceCatalog,
    category_of,
    family_of,
    has_local_nvme,
    is_graviton,
    parse_quantity,
)
from nightshift.virtualcluster.legacy import LEGACY
from nightshift.virtualcluster.spec import DEFAULT_AMI_ALIAS, NodeClass, Pool, VirtualClusterSpec


def validate(
    spec: VirtualClusterSpec, provider: str, catalog: InstanceCatalog | None = None
) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, pool in enumerate(spec.pools):
        path = f"spec.pools[{i}]"
        if pool.name in seen:
            problems.append(Problem(
                f"{path}.name",
                f"pool name {pool.name!r} is already used by spec.pools[{seen[pool.name]}]: "
                "give each pool its own name",
            ))
        seen.setdefault(pool.name, i)
        problems += _pool(path, pool, catalog)
    if provider == "aws":
        problems += _aws_nodeclass(spec.node_class)
    return problems


def _like(path: str, pool: Pool) -> list[Problem]:
    if pool.like is None:
        return []
    old = LEGACY.get(pool.like)
    if old is None:
        return [Problem(f"{path}.like", f"{pool.like!r} is not an instance type nightshift "
                        f"knows from the seeds ({', '.join(sorted(LEGACY))}): name one of "
                        "them, or give instanceTypes or families instead")]
    if old.class_ != pool.class_:
        return [Problem(f"{path}.like", f"{pool.like} is a {old.class_} type but the pool's "
                        f"class is {pool.class_}: set class: {old.class_}, or like a "
                        f"{pool.class_} type")]
    return []


def _pool(path: str, pool: Pool, catalog: InstanceCatalog | None) -> list[Problem]:
    out: list[Problem] = _like(path, pool)
    cats = CLASS_CATEGORIES[pool.class_]
    want = ", ".join(f"{c}*" for c in cats)
    for j, fam in enumerate(pool.families):
        fpath = f"{path}.families[{j}]"
        if "." in fam:
            out.append(Problem(fpath, f"{fam!r} is an instance type, not a family: "
                               f"write {family_of(fam)!r} or move it to instanceTypes"))
            continue
        if category_of(fam) not in cats:
            out.append(Problem(fpath, f"family {fam!r} is not of class {pool.class_} "
                               f"(families {want}): change the class or drop the family"))
        elif catalog is not None and fam not in catalog.families():
            out.append(Problem(fpath, f"unknown instance family {fam!r}: check the spelling "
                               "(e.g. c6i, r7g, m6id)"))
        out += _arch(fpath, fam, pool)
        if pool.local_disk == "raid0" and not has_local_nvme(fam):
            out.append(Problem(fpath, f"family {fam!r} has no instance-store NVMe, so "
                               "localDisk: raid0 cannot apply: pick a 'd' family "
                               f"(e.g. {fam}d) or drop localDisk"))
    for j, itype in enumerate(pool.instance_types):
        tpath = f"{path}.instanceTypes[{j}]"
        fam = family_of(itype)
        if catalog is not None and itype not in catalog.types:
            out.append(Problem(tpath, f"unknown instance type {itype!r}: use a name from "
                               "the instance catalog, e.g. c6i.2xlarge"))
            continue
        if category_of(fam) not in cats:
            out.append(Problem(tpath, f"instance type {itype!r} is not of class "
                               f"{pool.class_} (families {want}): change the class or the type"))
        if pool.families and fam not in pool.families:
            out.append(Problem(tpath, f"instance type {itype!r} is not in the pool's "
                               f"families {pool.families}: no node could match both; "
                               "list one or the other"))
        out += _arch(tpath, fam, pool)
    if pool.placement and pool.class_ != "cluster-compute":
        out.append(Problem(f"{path}.placement", "placement: cluster needs class "
                           "cluster-compute: set the class or drop placement"))
    if pool.max_cpu is not None and pool.max_cpu <= 0:
        out.append(Problem(f"{path}.maxCPU", "maxCPU must be above 0: it is the pool's "
                           "ceiling in cores"))
    if pool.max_nodes is not None and pool.max_nodes <= 0:
        out.append(Problem(f"{path}.maxNodes", "maxNodes must be above 0"))
    if pool.max_memory is not None:
        try:
            if parse_quantity(pool.max_memory) <= 0:
                raise ValueError
        except ValueError:
            out.append(Problem(f"{path}.maxMemory", f"{pool.max_memory!r} is not a "
                               "positive quantity: write e.g. 512Gi"))
    return out


def _arch(path: str, fam: str, pool: Pool) -> list[Problem]:
    arch = "arm64" if is_graviton(fam) else "amd64"
    if arch in pool.arch:
        return []
    return [Problem(path, f"{fam!r} is {arch} but the pool's arch is {pool.arch}: add "
                    f"{arch} to arch or pick another family")]


def _aws_nodeclass(nc: NodeClass) -> list[Problem]:
    out: list[Problem] = []
    if not nc.role and not nc.instance_profile:
        out.append(Problem("spec.nodeClass.role", "the AWS provider needs the IAM role "
                           "(or instanceProfile) its nodes use: set nodeClass.role to the "
                           "EKS node role name, e.g. KarpenterNodeRole-<cluster>"))
    if nc.role and nc.instance_profile:
        out.append(Problem("spec.nodeClass.instanceProfile", "role and instanceProfile "
                           "exclude each other: keep one"))
    if not nc.subnet_selector_terms:
        out.append(Problem("spec.nodeClass.subnetSelectorTerms", "the AWS provider needs "
                           "subnets: add e.g. {tags: {karpenter.sh/discovery: <cluster>}}"))
    if not nc.security_group_selector_terms:
        out.append(Problem("spec.nodeClass.securityGroupSelectorTerms", "the AWS provider "
                           "needs security groups: add e.g. "
                           "{tags: {karpenter.sh/discovery: <cluster>}}"))
    if nc.ami_selector_terms and nc.ami_alias:
        out.append(Problem("spec.nodeClass.amiSelectorTerms", "amiAlias and "
                           "amiSelectorTerms exclude each other: keep one"))
    if nc.ami_selector_terms and not nc.ami_family:
        out.append(Problem("spec.nodeClass.amiFamily", "amiSelectorTerms without an alias "
                           "need amiFamily (AL2023, Bottlerocket, ...) for the user data"))
    alias = nc.ami_alias or DEFAULT_AMI_ALIAS
    if (nc.ami_family and not nc.ami_selector_terms
            and nc.ami_family.lower() != alias.split("@", 1)[0]):
        # The render drops it: the alias (amiAlias, or al2023@latest) picks both the AMI
        # and its user-data format, and the nodes would boot another family unsaid.
        fix = ("a Custom family needs amiSelectorTerms naming the AMIs" if
               nc.ami_family == "Custom" else
               f"set amiAlias: {nc.ami_family.lower()}@latest for that family's EKS AMIs")
        out.append(Problem("spec.nodeClass.amiFamily", f"amiFamily {nc.ami_family} is not "
                           f"the family of the AMI alias {alias}, which picks the AMIs "
                           f"without amiSelectorTerms: {fix}, or remove amiFamily"))
    return out
