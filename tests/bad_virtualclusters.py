"""Bad VirtualCluster inputs: (id, manifest, refused by "cel" | "invalid", substring).

"cel" cases are refused by the CRD's schema/CEL rules (the lead runs them against the
real API server); "invalid" cases pass admission and get an Invalid condition from
nightshift.virtualcluster.validate (checked by tests/unit/test_vcvalidate.py, with the
provider given in the manifest or "aws" when auto).
"""

from __future__ import annotations

from typing import Any

AWS_NODECLASS: dict[str, Any] = {
    "role": "KarpenterNodeRole-demo",
    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
}


def vc(pools: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nightshift.io/v1alpha1",
        "kind": "VirtualCluster",
        "metadata": {"name": "bad", "namespace": "physics"},
        "spec": {"pools": pools, "nodeClass": AWS_NODECLASS, **spec},
    }


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown-class", vc([{"name": "w", "class": "quantum"}]), "cel", "Unsupported value"),
    ("families-contradict-class",
     vc([{"name": "w", "class": "memory", "families": ["c6i"]}]),
     "cel", "families must belong to the pool's class"),
    ("max-cpu-zero", vc([{"name": "w", "class": "compute", "maxCPU": 0}]),
     "cel", "maxCPU must be greater than 0"),
    ("max-cpu-negative", vc([{"name": "w", "class": "compute", "maxCPU": -4}]),
     "cel", "maxCPU must be greater than 0"),
    ("placement-on-compute",
     vc([{"name": "w", "class": "compute", "placement": "cluster"}]),
     "cel", "placement is only allowed on pools of class cluster-compute"),
    ("duplicate-pool-names",
     vc([{"name": "w", "class": "compute"}, {"name": "w", "class": "memory"}]),
     "cel", "pool names must be unique"),
    ("pool-name-not-dns", vc([{"name": "Big_Pool", "class": "compute"}]),
     "cel", "should match"),
    ("aws-explicit-without-role",
     vc([{"name": "w", "class": "compute"}], provider="aws",
        nodeClass={k: v for k, v in AWS_NODECLASS.items() if k != "role"}),
     "cel", "provider aws needs nodeClass.role"),
    ("role-and-instance-profile",
     vc([{"name": "w", "class": "compute"}],
        nodeClass={**AWS_NODECLASS, "instanceProfile": "p"}),
     "cel", "role and instanceProfile exclude each other"),
    ("reserved-label",
     vc([{"name": "w", "class": "compute", "labels": {"nightshift.io/pool": "x"}}]),
     "cel", "nightshift.io/* labels are set by the operator"),
    ("unknown-capacity", vc([{"name": "w", "class": "compute", "capacity": "reserved"}]),
     "cel", "Unsupported value"),
    # What Karpenter's NodePool refuses, refused here first, naming our field.
    ("karpenter-label",
     vc([{"name": "w", "class": "compute", "labels": {"karpenter.sh/capacity-type": "spot"}}]),
     "cel", "karpenter.sh labels are Karpenter's own"),
    ("hostname-label",
     vc([{"name": "w", "class": "compute", "labels": {"kubernetes.io/hostname": "n1"}}]),
     "cel", "kubernetes.io/hostname is each node's own name"),
    ("label-key-format",
     vc([{"name": "w", "class": "compute", "labels": {"team name": "x"}}]),
     "cel", "label keys are [prefix/]name"),
    ("label-value-format",
     vc([{"name": "w", "class": "compute", "labels": {"team": "radio astronomy"}}]),
     "cel", "should match"),
    ("taint-key-format",
     vc([{"name": "w", "class": "compute", "taints": [{"key": "gpu only"}]}]),
     "cel", "should match"),
    # Past admission: what only the operator can tell.
    ("aws-detected-without-role",
     vc([{"name": "w", "class": "compute"}],
        nodeClass={k: v for k, v in AWS_NODECLASS.items() if k != "role"}),
     "invalid", "spec.nodeClass.role"),
    ("aws-without-subnets",
     vc([{"name": "w", "class": "compute"}],
        nodeClass={k: v for k, v in AWS_NODECLASS.items() if k != "subnetSelectorTerms"}),
     "invalid", "spec.nodeClass.subnetSelectorTerms"),
    ("unknown-instance-type",
     vc([{"name": "w", "class": "compute", "instanceTypes": ["c6i.humongous"]}]),
     "invalid", "spec.pools[0].instanceTypes[0]: unknown instance type"),
    ("instance-type-of-other-class",
     vc([{"name": "w", "class": "memory", "instanceTypes": ["c6i.large"]}]),
     "invalid", "spec.pools[0].instanceTypes[0]: instance type 'c6i.large' is not of class"),
    ("unknown-family",
     vc([{"name": "w", "class": "compute", "families": ["c99q"]}]),
     "invalid", "spec.pools[0].families[0]: unknown instance family"),
    ("arm-family-amd64-pool",
     vc([{"name": "w", "class": "compute", "families": ["c7g"]}]),
     "invalid", "spec.pools[0].families[0]: 'c7g' is arm64"),
    ("raid0-without-nvme",
     vc([{"name": "w", "class": "compute", "families": ["c6i"], "localDisk": "raid0"}]),
     "invalid", "has no instance-store NVMe"),
    ("type-outside-families",
     vc([{"name": "w", "class": "compute", "families": ["c6i"],
          "instanceTypes": ["c7i.large"]}]),
     "invalid", "spec.pools[0].instanceTypes[0]: instance type 'c7i.large' is not in"),
    ("ami-terms-without-family",
     vc([{"name": "w", "class": "compute"}],
        nodeClass={**AWS_NODECLASS, "amiSelectorTerms": [{"id": "ami-0123"}]}),
     "invalid", "spec.nodeClass.amiFamily"),
    ("ami-family-without-terms",
     vc([{"name": "w", "class": "compute"}],
        nodeClass={**AWS_NODECLASS, "amiFamily": "Bottlerocket"}),
     "invalid", "spec.nodeClass.amiFamily: amiFamily Bottlerocket is not the family of "
                "the AMI alias al2023@latest, which picks the AMIs without amiSelectorTerms: "
                "set amiAlias: bottlerocket@latest for that family's EKS AMIs, or remove "
                "amiFamily"),
]


# The API server's exact errors for each "cel" case (Kubernetes v1.34, server-side dry
# run; each is a Status cause's field and message, as kubectl prints them), in sorted
# order since the API server's order is not fixed. `nightshift validate` must print
# exactly these (tests/unit/test_validate_cli.py); tests/integration/
# test_validate_parity.py compares both with a live API server.
API_SERVER_MESSAGES: dict[str, list[str]] = {
    "unknown-class": [
        "<nil>: Invalid value: null: some validation rules were not checked because the object "
        "was invalid; correct the existing errors to complete validation",
        'spec.pools[0].class: Unsupported value: "quantum": supported values: "compute", '
        '"memory", "general", "storage", "cluster-compute", "gpu"',
    ],
    "families-contradict-class": [
        "spec.pools[0]: Invalid value: \"object\": families must belong to the pool's class: "
        "compute c*, memory r*/x*/z*, general m*, storage i*/d*/im*/is*, cluster-compute "
        "c*/hpc*, gpu g*/p*",
    ],
    "max-cpu-zero": [
        'spec.pools[0].maxCPU: Invalid value: "integer": maxCPU must be greater than 0',
    ],
    "max-cpu-negative": [
        'spec.pools[0].maxCPU: Invalid value: "integer": maxCPU must be greater than 0',
    ],
    "placement-on-compute": [
        'spec.pools[0]: Invalid value: "object": placement is only allowed on pools of class '
        "cluster-compute",
    ],
    "duplicate-pool-names": [
        'spec.pools: Invalid value: "array": pool names must be unique',
    ],
    "pool-name-not-dns": [
        'spec.pools[0].name: Invalid value: "Big_Pool": spec.pools[0].name in body should match '
        "'^[a-z]([-a-z0-9]*[a-z0-9])?$'",
    ],
    "aws-explicit-without-role": [
        'spec: Invalid value: "object": provider aws needs nodeClass.role (the EKS node IAM '
        "role) or nodeClass.instanceProfile",
    ],
    "role-and-instance-profile": [
        'spec.nodeClass: Invalid value: "object": role and instanceProfile exclude each other: '
        "set one",
    ],
    "reserved-label": [
        'spec.pools[0].labels: Invalid value: "object": nightshift.io/* labels are set by the '
        "operator",
    ],
    "unknown-capacity": [
        "<nil>: Invalid value: null: some validation rules were not checked because the object "
        "was invalid; correct the existing errors to complete validation",
        'spec.pools[0].capacity: Unsupported value: "reserved": supported values: "spot", '
        '"on-demand", "spot-then-on-demand"',
    ],
    "karpenter-label": [
        'spec.pools[0].labels: Invalid value: "object": karpenter.sh labels are Karpenter\'s own '
        "(spec.pools[].capacity sets karpenter.sh/capacity-type): use another domain",
    ],
    "hostname-label": [
        'spec.pools[0].labels: Invalid value: "object": kubernetes.io/hostname is each node\'s '
        "own name: use another label",
    ],
    "label-key-format": [
        'spec.pools[0].labels: Invalid value: "object": label keys are [prefix/]name: a DNS '
        "subdomain prefix, a name of letters, digits, '-', '_' and '.'",
    ],
    "label-value-format": [
        'spec.pools[0].labels.team: Invalid value: "radio astronomy": spec.pools[0].labels.team '
        "in body should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'",
    ],
    "taint-key-format": [
        'spec.pools[0].taints[0].key: Invalid value: "gpu only": spec.pools[0].taints[0].key in '
        "body should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
        "(\\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$'",
    ],
}
