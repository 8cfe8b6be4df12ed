"""Real pods on the local cluster's real node (containerd + kubelet): our images, the API
from inside a pod, and the runner's stage-in, steps and commit against a real S3 server.

Skipped when the cluster has no Ready real node (`nightshift-localcluster up
--real-node`), or when its containerd lacks our images (`make images`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nightshift.pipelinerun import binding, jobs, runnerparts
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.runnerparts import SECRET_ACCESS_KEY_ID, SECRET_SECRET_ACCESS_KEY
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift_localcluster import helminstall
from nightshift_localcluster.nodeconfig import NODE_LABEL, NODE_NAME, NODE_TAINT
from tests.clusterutil import Kubectl, wait_for
from tests.s3server import VersityGW, running

RUNNER_IMAGE = "nightshift-runner:dev"
BUCKET = "realnode"


@pytest.fixture(scope="module")
def real_node(kubectl: Kubectl) -> dict[str, Any]:
    """The real node's Node object; skips when there is none, it is not Ready or it
    lacks the runner image (helminstall.real_node_problem says which, and what to do)."""
    node = helminstall.real_node([kubectl.bin, f"--kubeconfig={kubectl.kubeconfig}"])
    if problem := helminstall.real_node_problem(node, RUNNER_IMAGE):
        pytest.skip(problem)
    assert node is not None  # real_node_problem said why otherwise
    return node


@pytest.fixture(scope="module")
def gateway(real_node: dict[str, Any]) -> str:
    """The host as pods see it: the node's InternalIP is the CNI bridge's gateway."""
    return str(next(a["address"] for a in real_node["status"]["addresses"]
                    if a["type"] == "InternalIP"))


def on_real_node(pod_spec: dict[str, Any]) -> dict[str, Any]:
    pod_spec["nodeSelector"] = {NODE_LABEL[0]: NODE_LABEL[1]}
    pod_spec["tolerations"] = [{"key": NODE_TAINT["key"], "operator": "Equal",
                                "value": NODE_TAINT["value"], "effect": NODE_TAINT["effect"]}]
    return pod_spec


def pod_job(name: str, namespace: str, container: dict[str, Any],
            **spec: Any) -> dict[str, Any]:
    """A one-pod Job on the real node, its container named main, never retried."""
    pod = on_real_node({"restartPolicy": "Never", "containers": [{"name": "main", **container}],
                        **spec})
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"backoffLimit": 0, "template": {"spec": pod}}}


def job(name: str, namespace: str, script: str, **spec: Any) -> dict[str, Any]:
    return pod_job(name, namespace, {"image": RUNNER_IMAGE,
                                     "command": ["python3", "-c", script]}, **spec)


def stage_job(spec: PipelineRunSpec, namespace: str, run_name: str,
              runner_image: str = RUNNER_IMAGE) -> tuple[it.RunRef, dict[str, Any]]:
    """The first stage's Job for two items, as the operator renders it, on the real node.
    No PipelineRun owns it here (the garbage collector would delete an orphan)."""
    stage = spec.stages[0]
    run = it.RunRef(name=run_name, namespace=namespace, uid=str(uuid.uuid4()))
    manifest = jobs.render_job(
        run=run, spec=spec, stage=stage, attempt=0, completions=2,
        item_configmaps=[it.items_configmap_name(run.name, stage.name, 0)],
        parallelism=2, suspend=False, runner_image=runner_image)
    manifest["metadata"].pop("ownerReferences")
    on_real_node(manifest["spec"]["template"]["spec"])
    return run, manifest


def start_stage(kubectl: Kubectl, spec: PipelineRunSpec, namespace: str, run_name: str,
                items: list[str]) -> str:
    """Freeze `items` (two) as the operator would (`spec` bound), start stage_job; its name."""
    run, manifest = stage_job(spec, namespace, run_name)
    first = spec.stages[0]
    fuse = binding.fuse_mounts(first, {s.name: s for s in spec.storage})
    for cm in it.items_configmaps(run, first.name, items, last_step=first.steps[-1].name,
                                  fuse_mounts=fuse):
        cm["metadata"].pop("ownerReferences", None)
        kubectl.apply(cm)
    kubectl.apply(manifest)
    return str(manifest["metadata"]["name"])


def run_stage(kubectl: Kubectl, spec: PipelineRunSpec, namespace: str, run_name: str,
              items: list[str], timeout: float = 240) -> str:
    """start_stage, then wait for the Job to complete; its name."""
    name = start_stage(kubectl, spec, namespace, run_name, items)
    wait_job(kubectl, name, namespace, timeout=timeout)
    return name


def wait_job(kubectl: Kubectl, name: str, namespace: str, timeout: float = 180) -> None:
    def finished() -> str | None:
        job = kubectl.kube.get("batch/v1", "Job", name, namespace) or {}
        for c in job.get("status", {}).get("conditions", []):
            if c["type"] in ("Complete", "Failed") and c["status"] == "True":
                return str(c["type"])
        return None

    result = wait_for(f"job {name} to finish", finished, timeout, interval=1)
    if result != "Complete":
        pods = kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
        logs = kubectl("logs", f"job/{name}", "-n", namespace, "--all-containers",
                       check=False)
        raise AssertionError(f"job {name}: {result}\n{pods}\n{logs.stdout}{logs.stderr}")


def test_job_with_runner_image_completes_and_logs_read(real_node: dict[str, Any],
                                                       kubectl: Kubectl, namespace: str) -> None:
    marker = uuid.uuid4().hex
    script = (f"import platform, socket; print('{marker}', platform.python_version(), "
              "socket.gethostname())")
    kubectl.apply(job("hello", namespace, script))
    wait_job(kubectl, "hello", namespace)
    pod = json.loads(kubectl("get", "pods", "-n", namespace, "-l", "job-name=hello", "-o",
                             "json").stdout)["items"][0]
    assert pod["spec"]["nodeName"] == NODE_NAME
    out = kubectl("logs", "job/hello", "-n", namespace).stdout.split()
    assert out[0] == marker and out[1].startswith("3.11.") and out[2] == pod["metadata"]["name"]


API_SCRIPT = """
import json, ssl, urllib.request, urllib.error
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(f"{sa}/token").read()
ns = open(f"{sa}/namespace").read()
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
def get(path):
    req = urllib.request.Request("https://kubernetes.default.svc" + path,
                                 headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None
status, cm = get(f"/api/v1/namespaces/{ns}/configmaps/probe")
print(json.dumps({"configmap": status, "value": (cm or {}).get("data", {}).get("k"),
                  "secrets": get(f"/api/v1/namespaces/{ns}/secrets")[0]}))
"""


def test_pod_reads_the_api_with_its_service_account(real_node: dict[str, Any],
                                                    kubectl: Kubectl, namespace: str) -> None:
    value = uuid.uuid4().hex
    kubectl("create", "configmap", "probe", "-n", namespace, f"--from-literal=k={value}")
    kubectl("create", "role", "read-probe", "-n", namespace, "--verb=get",
            "--resource=configmaps", "--resource-name=probe")
    kubectl("create", "rolebinding", "read-probe", "-n", namespace, "--role=read-probe",
            f"--serviceaccount={namespace}:default")
    # Through cluster DNS (kubernetes.default.svc) and kube-proxy (the Service's ClusterIP).
    kubectl.apply(job("api", namespace, API_SCRIPT))
    wait_job(kubectl, "api", namespace)
    seen = json.loads(kubectl("logs", "job/api", "-n", namespace).stdout)
    # Its own identity: allowed what its Role grants, refused the rest.
    assert seen == {"configmap": 200, "value": value, "secrets": 403}


@pytest.fixture
def s3_on_gateway(gateway: str) -> Iterator[VersityGW]:
    with running(host=gateway) as gw:
        gw.client().create_bucket(Bucket=BUCKET)
        yield gw


def s3_storage(gw: VersityGW, name: str = "data") -> dict[str, Any]:
    """A spec.storage entry for BUCKET's proj/ on `gw`, its keys in s3_credentials'
    Secret."""
    return {"name": name, "s3": {"bucket": BUCKET, "prefix": "proj/", "endpoint": gw.endpoint,
                                 "region": "us-east-1", "credentialsSecret": "s3-creds"}}


def s3_credentials(kubectl: Kubectl, namespace: str, gw: VersityGW,
                   name: str = "s3-creds", user: str | None = None) -> None:
    """The Secret a storage's credentialsSecret names, holding `gw`'s root keys or those
    of one of its `users`."""
    access, secret = (user, gw.users[user]) if user else (gw.access_key, gw.secret_key)
    kubectl("create", "secret", "generic", name, "-n", namespace,
            f"--from-literal={SECRET_ACCESS_KEY_ID}={access}",
            f"--from-literal={SECRET_SECRET_ACCESS_KEY}={secret}")


def test_runner_stage_in_steps_commit_in_real_pods(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str,
        s3_on_gateway: VersityGW) -> None:
    gw = s3_on_gateway
    s3 = gw.client()
    for item in ("a", "b"):
        s3.put_object(Bucket=BUCKET, Key=f"proj/raw/{item}/in.txt", Body=f"{item}-data\n".encode())
    s3_credentials(kubectl, namespace, gw)
    spec = PipelineRunSpec.model_validate({
        "storage": [s3_storage(gw)],
        "archive": {"storage": "data"},
        "stages": [{
            "name": "double", "image": RUNNER_IMAGE, "forEach": {"items": ["a", "b"]},
            # No node cache: it is a hostPath, and this test leaves nothing on the host.
            "inputs": [{"storage": "data", "path": "raw/{item}/", "cache": False}],
            "outputs": [{"storage": "data", "path": "out/{item}/"}],
            "steps": [
                {"name": "cat", "command": ["sh", "-c", 'cat "$NIGHTSHIFT_INPUTS/in.txt" '
                                            '"$NIGHTSHIFT_INPUTS/in.txt" > '
                                            '"$NIGHTSHIFT_OUTPUTS/out.txt"']},
                {"name": "size", "command": ["sh", "-c", 'wc -c < "$NIGHTSHIFT_OUTPUTS/out.txt"'
                                             ' > "$NIGHTSHIFT_OUTPUTS/size.txt"']},
            ],
        }],
    })
    name = run_stage(kubectl, spec, namespace, "rn", ["a", "b"])

    for item in ("a", "b"):
        body = s3.get_object(Bucket=BUCKET, Key=f"proj/out/{item}/out.txt")["Body"].read()
        assert body == f"{item}-data\n".encode() * 2
        size = s3.get_object(Bucket=BUCKET, Key=f"proj/out/{item}/size.txt")["Body"].read()
        assert int(size) == len(body)
        success = json.loads(s3.get_object(Bucket=BUCKET,
                                           Key=f"proj/out/{item}/_SUCCESS")["Body"].read())
        assert {f["key"] for f in success["files"]} == {f"proj/out/{item}/out.txt",
                                                         f"proj/out/{item}/size.txt"}
    for index, item in enumerate(("a", "b")):
        rec = json.loads(s3.get_object(
            Bucket=BUCKET, Key=f"proj/_nightshift/rn/double/{index}.json")["Body"].read())
        assert rec["item"] == item and rec["phase"] == "succeeded" and rec["exitCode"] == 0
        assert rec["node"] == NODE_NAME and [s["name"] for s in rec["steps"]] == ["cat", "size"]
    logs = kubectl("logs", f"job/{name}", "-n", namespace, "-c", runnerparts.STAGE_IN_CONTAINER)
    assert "staged 1 files" in logs.stdout + logs.stderr
