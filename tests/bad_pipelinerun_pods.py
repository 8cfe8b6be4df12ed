"""Bad PipelineRun values that would land in a stage Job's pod (issue 14: no silent failure).

One case per class of value the API server refuses in a Job (found by applying rendered
Jobs to a v1.34 API server with --dry-run=server, see docs/security.md) or the kubelet
refuses in a pod (an image it cannot parse). Each is refused at admission ("cel": the
CRD's patterns and rules) or gives an Invalid condition naming the run's field
("invalid": pipelinerun/podvalues.py, for what CEL cannot afford). Same shape as
tests/bad_pipelineruns.py, which appends these to its BAD table.
"""

from __future__ import annotations

import copy
from typing import Any


def stage(**kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "s", "image": "busybox:1.36",
                           "forEach": {"items": ["a", "b"]},
                           "steps": [{"name": "main", "command": ["true"]}]}
    out.update(copy.deepcopy(kw))
    return out


def run(st: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nightshift.io/v1alpha1", "kind": "PipelineRun",
            "metadata": {"name": "bad", "namespace": "physics"},
            "spec": {"stages": [st or stage()], **spec}}


def step(**kw: Any) -> dict[str, Any]:
    return {"name": "main", "command": ["true"], **kw}


def pvc(**kw: Any) -> list[dict[str, Any]]:
    return [{"name": kw.pop("name", "vol"), "pvc": {"claimName": "claim", **kw}}]


FIELD_REF = {"fieldRef": {"fieldPath": "metadata.name"}}

BAD: list[tuple[str, dict[str, Any], str, str]] = [
    # --- refused at admission ----------------------------------------------------------
    ("image-not-pullable", run(stage(image="BusyBox:1.36")), "cel",
     "spec.stages[0].image in body should match"),
    ("step-image-not-pullable", run(stage(steps=[step(image="Casa:6.6")])), "cel",
     "spec.stages[0].steps[0].image in body should match"),
    ("runner-image-not-pullable", run(runnerImage="runner image"), "cel",
     "spec.runnerImage in body should match"),
    ("env-name-with-equals", run(stage(env=[{"name": "A=B", "value": "x"}])), "cel",
     "spec.stages[0].env[0].name in body should match"),
    ("env-without-name", run(stage(env=[{"value": "x"}])), "cel",
     "spec.stages[0].env[0].name: Required value"),
    ("step-env-empty-name", run(stage(steps=[step(env=[{"name": "", "value": "x"}])])),
     "cel", "spec.stages[0].steps[0].env[0].name in body should be at least 1 chars long"),
    ("env-value-and-value-from",
     run(stage(env=[{"name": "A", "value": "x", "valueFrom": FIELD_REF}])), "cel",
     "env[] sets both value and valueFrom"),
    ("env-two-sources",
     run(stage(env=[{"name": "A", "valueFrom": {
         **FIELD_REF, "secretKeyRef": {"name": "s", "key": "k"}}}])), "cel",
     "env[].valueFrom must set exactly one of"),
    ("env-unknown-field-path",
     run(stage(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}}])),
     "cel", "spec.stages[0].env[0].valueFrom.fieldRef.fieldPath in body should match"),
    ("env-secret-without-key",
     run(stage(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}])), "cel",
     "spec.stages[0].env[0].valueFrom.secretKeyRef.key: Required value"),
    ("pod-label-bad-key", run(stage(podLabels={"bad key": "x"})), "cel",
     "podLabels: every key must be a qualified name"),
    ("pod-label-bad-value", run(stage(podLabels={"k": "bad value"})), "cel",
     "spec.stages[0].podLabels.k in body should match"),
    ("pod-annotation-bad-key", run(stage(podAnnotations={"a/b/c": "x"})), "cel",
     "podAnnotations: every key must be a qualified name"),
    ("pool-not-a-label", run(stage(pool="Bad Pool")), "cel",
     "spec.stages[0].pool in body should match"),
    ("virtual-cluster-not-a-label", run(virtualCluster="Bad VC"), "cel",
     "spec.virtualCluster in body should match"),
    ("service-account-not-a-name", run(stage(serviceAccountName="Bad_SA")), "cel",
     "spec.stages[0].serviceAccountName in body should match"),
    ("storage-name-not-a-label", run(storage=pvc(name="Bad_Vol")), "cel",
     "spec.storage[0].name in body should match"),
    ("storage-name-too-long", run(storage=pvc(name="v" * 45)), "cel",
     "spec.storage[0].name: Too long"),
    ("pvc-claim-not-a-name", run(storage=[{"name": "vol", "pvc": {"claimName": "Bad_C"}}]),
     "cel", "spec.storage[0].pvc.claimName in body should match"),
    ("pvc-subpath-climbs", run(storage=pvc(subPath="../x")), "cel",
     "spec.storage[0].pvc.subPath in body should match"),
    ("s3-secret-not-a-name",
     run(storage=[{"name": "raw", "s3": {"bucket": "raw-data", "credentialsSecret": "Bad_S"}}]),
     "cel", "spec.storage[0].s3.credentialsSecret in body should match"),
    # --- what CEL cannot afford: an Invalid condition naming the field ------------------
    ("resources-not-a-quantity", run(stage(resources={"requests": {"cpu": "1x"}})),
     "invalid", "spec.stages[0].resources.requests[cpu]: '1x' is not a quantity"),
    ("resources-negative", run(stage(resources={"requests": {"memory": "-1Gi"}})),
     "invalid", "spec.stages[0].resources.requests[memory]: '-1Gi' must not be negative"),
    ("resources-request-above-limit",
     run(stage(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}})), "invalid",
     "spec.stages[0].resources.requests[cpu]: is above its limit"),
    ("resources-unknown-resource", run(stage(resources={"requests": {"gpu": "1"}})),
     "invalid", "'gpu' is not a resource a container can ask for"),
    ("resources-extended-overcommitted",
     run(stage(resources={"requests": {"nvidia.com/gpu": "1"},
                          "limits": {"nvidia.com/gpu": "2"}})), "invalid",
     "spec.stages[0].resources.limits[nvidia.com/gpu]: nvidia.com/gpu cannot be overcommitted"),
    ("resources-hugepages-alone",
     run(stage(resources={"requests": {"hugepages-2Mi": "2Mi"},
                          "limits": {"hugepages-2Mi": "2Mi"}})), "invalid",
     "hugepages need a cpu or memory request or limit too"),
    ("pod-label-key-too-long", run(stage(podLabels={"k" * 64: "v"})), "invalid",
     "spec.stages[0].podLabels: key 'kkkk"),
    ("pod-annotations-too-large", run(stage(podAnnotations={"k": "x" * 262_144})),
     "invalid", "bytes of annotations"),
    ("env-completion-index", run(stage(env=[{"name": "JOB_COMPLETION_INDEX", "value": "0"}])),
     "invalid", "spec.stages[0].env[0].name: JOB_COMPLETION_INDEX is set by the Job "
     "controller for each pod"),
    ("step-env-nightshift-name",
     run(stage(steps=[step(env=[{"name": "NIGHTSHIFT_BATCH", "value": "1"}])])), "invalid",
     "spec.stages[0].steps[0].env[0].name: NIGHTSHIFT_BATCH is set by Nightshift"),
]

# The API server's exact errors for each "cel" case (kube-openapi's messages for the
# patterns and required fields, the CRD's for its rules), sorted.
API_SERVER_MESSAGES: dict[str, list[str]] = {
    'image-not-pullable': [
        'spec.stages[0].image: Invalid value: "BusyBox:1.36": spec.stages[0].image in bod'
        "y should match '^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\\.([a-zA-Z0"
        '-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\\[[0-9a-fA-F:.]+\\])(:[0-9]+)?/)?[a-z0'
        '-9]+((\\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_]['
        'A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-'
        "fA-F]{32,})?$'",
    ],
    'runner-image-not-pullable': [
        'spec.runnerImage: Invalid value: "runner image": spec.runnerImage in body should'
        " match '^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\\.([a-zA-Z0-9]|[a-z"
        'A-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\\[[0-9a-fA-F:.]+\\])(:[0-9]+)?/)?[a-z0-9]+((\\.'
        '|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-'
        '9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32'
        ",})?$'",
    ],
    'env-name-with-equals': [
        'spec.stages[0].env[0].name: Invalid value: "A=B": spec.stages[0].env[0].name in '
        "body should match '^[ -<>-~]+$'",
    ],
    'env-without-name': [
        '<nil>: Invalid value: null: some validation rules were not checked because the o'
        'bject was invalid; correct the existing errors to complete validation',
        'spec.stages[0].env[0].name: Required value',
    ],
    'step-env-empty-name': [
        'spec.stages[0].steps[0].env[0].name: Invalid value: "": spec.stages[0].steps[0].'
        'env[0].name in body should be at least 1 chars long',
    ],
    'env-value-and-value-from': [
        'spec.stages[0].env[0]: Invalid value: "object": env[] sets both value and valueF'
        'rom; set one of them',
    ],
    'env-two-sources': [
        'spec.stages[0].env[0].valueFrom: Invalid value: "object": env[].valueFrom must s'
        'et exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef',
    ],
    'env-unknown-field-path': [
        'spec.stages[0].env[0].valueFrom.fieldRef.fieldPath: Invalid value: "spec.nope": '
        "spec.stages[0].env[0].valueFrom.fieldRef.fieldPath in body should match '^(metad"
        'ata\\.(name|namespace|uid)|spec\\.(nodeName|serviceAccountName)|status\\.(hostIPs?|'
        "podIPs?)|metadata\\.(labels|annotations)\\[.+\\])$'",
    ],
    'env-secret-without-key': [
        '<nil>: Invalid value: null: some validation rules were not checked because the o'
        'bject was invalid; correct the existing errors to complete validation',
        'spec.stages[0].env[0].valueFrom.secretKeyRef.key: Required value',
    ],
    'pod-label-bad-key': [
        'spec.stages[0].podLabels: Invalid value: "object": podLabels: every key must be '
        "a qualified name, [prefix/]name: the name alphanumeric with '-', '_' or '.' insi"
        'de, the prefix a DNS subdomain',
    ],
    'pod-label-bad-value': [
        'spec.stages[0].podLabels.k: Invalid value: "bad value": spec.stages[0].podLabels'
        ".k in body should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'",
    ],
    'pod-annotation-bad-key': [
        'spec.stages[0].podAnnotations: Invalid value: "object": podAnnotations: every ke'
        "y must be a qualified name, [prefix/]name: the name alphanumeric with '-', '_' o"
        "r '.' inside, the prefix a DNS subdomain",
    ],
    'pool-not-a-label': [
        'spec.stages[0].pool: Invalid value: "Bad Pool": spec.stages[0].pool in body shou'
        "ld match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    ],
    'virtual-cluster-not-a-label': [
        'spec.virtualCluster: Invalid value: "Bad VC": spec.virtualCluster in body should'
        " match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    ],
    'service-account-not-a-name': [
        'spec.stages[0].serviceAccountName: Invalid value: "Bad_SA": spec.stages[0].servi'
        "ceAccountName in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-"
        "a-z0-9]*[a-z0-9])?)*$'",
    ],
    'storage-name-not-a-label': [
        'spec.storage[0].name: Invalid value: "Bad_Vol": spec.storage[0].name in body sho'
        "uld match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    ],
    'storage-name-too-long': [
        '<nil>: Invalid value: null: some validation rules were not checked because the o'
        'bject was invalid; correct the existing errors to complete validation',
        'spec.storage[0].name: Too long: may not be more than 44 bytes',
    ],
    'pvc-claim-not-a-name': [
        'spec.storage[0].pvc.claimName: Invalid value: "Bad_C": spec.storage[0].pvc.claim'
        "Name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*["
        "a-z0-9])?)*$'",
    ],
    'pvc-subpath-climbs': [
        'spec.storage[0].pvc.subPath: Invalid value: "../x": spec.storage[0].pvc.subPath '
        "in body should match '^$|^(\\.|\\.\\.\\.+|[^/]*[^/.][^/]*)(/(\\.?|\\.\\.\\.+|[^/]*[^/.]["
        "^/]*))*$'",
    ],
    's3-secret-not-a-name': [
        'spec.storage[0].s3.credentialsSecret: Invalid value: "Bad_S": spec.storage[0].s3'
        ".credentialsSecret in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-"
        "9]([-a-z0-9]*[a-z0-9])?)*$'",
    ],
}

# The same pattern as the stage's image, at the step's path.
API_SERVER_MESSAGES["step-image-not-pullable"] = [
    API_SERVER_MESSAGES["image-not-pullable"][0]
    .replace("spec.stages[0].image", "spec.stages[0].steps[0].image")
    .replace('"BusyBox:1.36"', '"Casa:6.6"')]
