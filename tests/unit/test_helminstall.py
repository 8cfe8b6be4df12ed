"""The test bed's chart values for the local cluster (nightshift_localcluster.helminstall):
they pass the chart's schema and put the operator pod where `make images` put its image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nightshift_localcluster import helminstall
from nightshift_localcluster.nodeconfig import NODE_LABEL, NODE_NAME, NODE_TAINT
from tests.unit.test_chart_lint import NIGHTSHIFT, helm_bin


def node(ready: str = "True", images: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": NODE_NAME},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "images": [{"names": list(images)}]}}


def test_real_node_problems_say_what_to_do() -> None:
    missing = helminstall.real_node_problem(None)
    assert missing is not None and NODE_NAME in missing
    not_ready = helminstall.real_node_problem(node("False"))
    assert not_ready is not None and "not Ready" in not_ready
    no_image = helminstall.real_node_problem(node(images=("docker.io/library/other:dev",)))
    assert no_image is not None and "make images" in no_image
    assert helminstall.real_node_problem(node(images=(helminstall.OPERATOR_IMAGE_REF,))) is None


def test_real_node_problems_for_another_image_name_that_image() -> None:
    runner = "nightshift-runner:dev"
    with_operator = node(images=(helminstall.OPERATOR_IMAGE_REF,))
    problem = helminstall.real_node_problem(with_operator, runner)
    assert problem is not None and runner in problem and "make images" in problem
    not_ready = helminstall.real_node_problem(node("False"), runner)
    assert not_ready is not None and "not Ready" in not_ready
    listed = node(images=("docker.io/library/nightshift-runner:dev",))
    assert helminstall.real_node_problem(listed, runner) is None


def test_missing_image_names_the_image_as_containerd_lists_it() -> None:
    listed = node(images=("docker.io/library/nightshift-mpi:dev",))
    assert helminstall.missing_image(listed, "nightshift-mpi:dev") is None
    other_tag = helminstall.missing_image(listed, "nightshift-mpi:v2")
    assert other_tag is not None and "nightshift-mpi:v2" in other_tag and "make images" in other_tag
    assert helminstall.missing_image({"status": {}}, "nightshift-runner:dev") is not None


def test_local_values_render_a_pod_on_the_real_node() -> None:
    catalog = Path("/opt/catalog/aws_instance_types.json")
    values = helminstall.local_values(watch_namespaces=["runs"], catalog=catalog, replicas=2,
                                      extra={"config": {"resync": 5}})
    r = helminstall.helm(helm_bin(), "", "template", "nightshift", str(NIGHTSHIFT),
                         "--namespace", "op", values=values)
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 2
    assert pod["nodeSelector"] == {NODE_LABEL[0]: NODE_LABEL[1]}
    assert pod["tolerations"][0]["key"] == NODE_TAINT["key"]
    (container,) = pod["containers"]
    assert container["image"] == "nightshift-operator:dev"
    assert container["imagePullPolicy"] == "Never"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NIGHTSHIFT_RUNNER_IMAGE"] == "nightshift-runner:dev"
    assert env["NIGHTSHIFT_INSTANCE_CATALOG"] == "/etc/nightshift/catalog/aws_instance_types.json"
    # extra merged into config, the chart's other config defaults kept.
    assert env["NIGHTSHIFT_RESYNC"] == "5" and env["NIGHTSHIFT_MIN_PASS_INTERVAL"] == "1"
    assert env["NIGHTSHIFT_PEERING"] == "nightshift"
    volume = next(v for v in pod["volumes"] if v["name"] == "catalog")
    assert volume["hostPath"] == {"path": "/opt/catalog", "type": "Directory"}
    assert [d["metadata"]["namespace"] for d in docs if d["kind"] == "KopfPeering"] == ["runs"]


def test_the_imported_image_id_rolls_the_operator(tmp_path: Path) -> None:
    """hack/images.sh stamps what it imported; the demo puts it on the pod, so a new
    build under the same :dev tag changes the template and helm upgrade rolls it."""
    assert helminstall.imported_image_id(tmp_path) is None
    # The stamps sit beside the root the node's containerd config names (the build
    # cache's, shared between checkouts), not in the state directory.
    config = tmp_path / "realnode" / "containerd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'version = 2\nroot = "{tmp_path}/cache/containerd/root"\n')
    assert helminstall.imported_image_id(tmp_path) is None
    stamp = (tmp_path / "cache" / "containerd" / "nightshift-imported" /
             f"{helminstall.OPERATOR_REPOSITORY}.id")
    stamp.parent.mkdir(parents=True)
    stamp.write_text("sha256:abc\n")
    image_id = helminstall.imported_image_id(tmp_path)
    assert image_id == "sha256:abc"
    values = helminstall.local_values(
        watch_namespaces=["runs"],
        extra={"podAnnotations": {helminstall.IMAGE_ID_ANNOTATION: image_id}})
    r = helminstall.helm(helm_bin(), "", "template", "nightshift", str(NIGHTSHIFT),
                         "--namespace", "op", values=values)
    assert r.returncode == 0, r.stderr
    (deploy,) = [d for d in yaml.safe_load_all(r.stdout) if d and d["kind"] == "Deployment"]
    annotations = deploy["spec"]["template"]["metadata"]["annotations"]
    assert annotations[helminstall.IMAGE_ID_ANNOTATION] == "sha256:abc"
