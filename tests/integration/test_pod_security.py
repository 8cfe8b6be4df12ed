"""A stage's pods run in a namespace that enforces Pod Security "restricted" (issue 14).

On the real node (containerd + kubelet, images from `make images`): the Job the
operator renders for a stage with the runner (stage-in from S3, two steps, commit and
task record) is admitted and completes in a namespace labelled
pod-security.kubernetes.io/enforce=restricted, its steps run as the stage's non-root
user with no API token (the stage names no serviceAccountName), and the opt-ins that
need more (the node cache's hostPath, a root stage-in) are what the admission refuses
there. The run on the real node is skipped without one or
its images, as tests/integration/test_real_node.py; the admission check needs neither.
"""

from __future__ import annotations

import json
from typing import Any

from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.clusterutil import Kubectl
from tests.integration.test_real_node import (  # noqa: F401  (fixtures)
    BUCKET,
    RUNNER_IMAGE,
    gateway,
    real_node,
    run_stage,
    s3_credentials,
    s3_on_gateway,
    stage_job,
)
from tests.s3server import VersityGW

ENFORCE = "pod-security.kubernetes.io/enforce"
# Where the kubelet puts a ServiceAccount token; a stage without serviceAccountName has none.
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def _spec(endpoint: str, **extra: Any) -> PipelineRunSpec:
    return PipelineRunSpec.model_validate({
        "storage": [{"name": "data", "s3": {"bucket": BUCKET, "prefix": "sec/",
                                            "endpoint": endpoint, "region": "us-east-1",
                                            "credentialsSecret": "s3-creds"}}],
        "archive": {"storage": "data"},
        "stages": [{
            "name": "whoami", "image": RUNNER_IMAGE, "forEach": {"items": ["a", "b"]},
            "runAsUser": 4242, "runAsGroup": 4343,
            "inputs": [{"storage": "data", "path": "raw/{item}/"}],
            "outputs": [{"storage": "data", "path": "out/{item}/"}],
            "steps": [
                {"name": "ids", "command": ["sh", "-c", 'id -u > "$NIGHTSHIFT_OUTPUTS/uid"; '
                                            'id -g > "$NIGHTSHIFT_OUTPUTS/gid"; '
                                            f'if [ -e {TOKEN} ]; then echo mounted; '
                                            'else echo none; fi > "$NIGHTSHIFT_OUTPUTS/token"']},
                {"name": "copy", "command": ["sh", "-c", 'cp "$NIGHTSHIFT_INPUTS/in.txt" '
                                             '"$NIGHTSHIFT_OUTPUTS/out.txt"']},
            ],
        }],
        **extra,
    })


def _job(spec: PipelineRunSpec, namespace: str) -> dict[str, Any]:
    return stage_job(spec, namespace, "sec")[1]


def _probe_pod(spec: PipelineRunSpec, namespace: str) -> dict[str, Any]:
    """One pod as the Job controller would make it from the stage Job's template."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": _job(spec, namespace)["spec"]["template"]["spec"]}


def test_restricted_admission_takes_the_pods_and_refuses_the_opt_ins(
        kubectl: Kubectl, namespace: str) -> None:
    """Pod Security admission only, no real node needed: a server-side dry run of the
    pods the operator's Jobs would have, in a namespace that enforces restricted."""
    kubectl("label", "namespace", namespace, f"{ENFORCE}=restricted", "--overwrite")
    endpoint = "http://192.0.2.1:7070"  # rendered only, never contacted
    for extra in ({}, {"processSampling": True}):
        pod = _probe_pod(_spec(endpoint, **extra), namespace)
        r = kubectl("apply", "--dry-run=server", "-f", "-", input_=json.dumps(pod),
                    check=False)
        assert r.returncode == 0, (extra, r.stderr)
        assert "violates PodSecurity" not in r.stderr, r.stderr
    pod = _probe_pod(_spec(endpoint, nodeCache=True), namespace)
    r = kubectl("apply", "--dry-run=server", "-f", "-", input_=json.dumps(pod), check=False)
    assert r.returncode != 0 and 'violates PodSecurity "restricted' in r.stderr, r.stderr
    assert 'restricted volume type "hostPath"' in r.stderr, r.stderr
    assert "runAsNonRoot != true" in r.stderr and "runAsUser=0" in r.stderr, r.stderr


def test_a_stage_runs_in_a_restricted_namespace(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str,  # noqa: F811
        s3_on_gateway: VersityGW) -> None:  # noqa: F811
    kubectl("label", "namespace", namespace, f"{ENFORCE}=restricted", "--overwrite")
    gw = s3_on_gateway
    s3 = gw.client()
    for item in ("a", "b"):
        s3.put_object(Bucket=BUCKET, Key=f"sec/raw/{item}/in.txt", Body=item.encode())
    s3_credentials(kubectl, namespace, gw)
    spec = _spec(gw.endpoint)
    run_stage(kubectl, spec, namespace, "sec", ["a", "b"])
    for index, item in enumerate(("a", "b")):
        got = {k: s3.get_object(Bucket=BUCKET, Key=f"sec/out/{item}/{k}")["Body"].read()
               for k in ("uid", "gid", "token", "out.txt")}
        assert got == {"uid": b"4242\n", "gid": b"4343\n", "token": b"none\n",
                       "out.txt": item.encode()}, got
        record = json.loads(s3.get_object(
            Bucket=BUCKET, Key=f"sec/_nightshift/sec/whoami/{index}.json")["Body"].read())
        assert record["phase"] == "succeeded"
        # Not sampled without spec.processSampling: unknown, not zero.
        assert record["cpuSeconds"] is None and record["samples"] == 0

