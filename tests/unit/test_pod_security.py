"""Generated pods meet Pod Security "restricted" unless the run opts into more (issue 14).

`restricted_violations` reads a pod spec as the Pod Security admission's restricted
profile (v1.34) does; the real check is tests/integration/test_pod_security.py, in a
namespace that enforces it, on the real node.
"""

from __future__ import annotations

from typing import Any

import pytest

from nightshift.api import conditions as cond
from nightshift.config import OperatorConfig
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import jobs
from nightshift.pipelinerun import runnerparts as rp
from nightshift.pipelinerun.plan import plan
from nightshift.pipelinerun.plantypes import Observed
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift.runner import cache
from tests.unit.test_plan import T0, items_for, make_run

RUN = it.RunRef(name="nightly", namespace="physics", uid="uid-1")
S3 = {"name": "raw", "s3": {"bucket": "raw-data", "endpoint": "http://gw:7070"}}
# Restricted allows these volume types only.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    out = []
    sc = pod.get("securityContext") or {}
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds)}")
    if pod.get("hostPID") or pod.get("hostIPC") or pod.get("hostNetwork"):
        out.append("host namespaces")
    if (sc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        out.append("pod seccompProfile")
    for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
        csc = c.get("securityContext") or {}
        name = c["name"]
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation")
        if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
            out.append(f"{name}: capabilities.drop ALL")
        if set((csc.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: capabilities.add")
        if csc.get("privileged"):
            out.append(f"{name}: privileged")
        non_root = csc.get("runAsNonRoot", sc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{name}: runAsNonRoot")
        if csc.get("runAsUser", sc.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
    return out


def pod_of(spec: dict[str, Any], **stage: Any) -> dict[str, Any]:
    st = {"name": "ifu", "image": "busybox:1.36", "forEach": {"items": ["a"]},
          "steps": [{"name": "one", "command": ["true"]}, {"name": "two", "command": ["true"]}],
          **stage}
    sp = PipelineRunSpec.model_validate({"stages": [st], **spec})
    job = jobs.render_job(run=RUN, spec=sp, stage=sp.stages[0], attempt=0, completions=1,
                          item_configmaps=["cm"], parallelism=1, suspend=False,
                          runner_image="nightshift-runner:dev")
    return dict(job["spec"]["template"]["spec"])


DATA = {"inputs": [{"storage": "raw", "path": "in/{item}/"}],
        "outputs": [{"storage": "raw", "path": "out/{item}/"}]}


def test_a_plain_stage_is_restricted() -> None:
    pod = pod_of({})
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["runAsUser"] == 65532
    assert "shareProcessNamespace" not in pod


def test_a_stage_with_the_runner_is_restricted() -> None:
    pod = pod_of({"storage": [S3]}, **DATA)
    assert restricted_violations(pod) == []
    assert "shareProcessNamespace" not in pod
    runner = [c for c in pod["initContainers"] if c["name"].startswith("nightshift-")]
    assert len(runner) == 2
    assert all(c["securityContext"]["readOnlyRootFilesystem"] for c in runner)
    # The user's steps keep a writable root; the rest is the same.
    steps = [c for c in [*pod["initContainers"], *pod["containers"]] if c not in runner]
    assert [c["name"] for c in steps] == ["one", "two"]
    assert all("readOnlyRootFilesystem" not in c["securityContext"] for c in steps)


def test_user_and_group_per_stage() -> None:
    sc = pod_of({}, runAsUser=1000, runAsGroup=100)["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"]) == (1000, 100)
    # Only configMap and emptyDir volumes: nothing for an fsGroup to own.
    assert "fsGroup" not in sc and "fsGroupChangePolicy" not in sc
    # The runner (its containers may write the work volume as another user) or a
    # claim: the stage's group owns them.
    sc = pod_of({"storage": [S3]}, runAsUser=1000, runAsGroup=100, **DATA)["securityContext"]
    assert (sc["fsGroup"], sc["fsGroupChangePolicy"]) == (100, "OnRootMismatch")


def test_the_node_cache_is_an_opt_in_that_costs_restricted() -> None:
    pod = pod_of({"storage": [S3], "nodeCache": True}, **DATA)
    assert restricted_violations(pod) == [
        "volume nightshift-cache: ['hostPath']", "nightshift-stage-in: runAsNonRoot",
        "nightshift-stage-in: runAsUser 0"]
    (vol,) = [v for v in pod["volumes"] if v["name"] == "nightshift-cache"]
    # Only this namespace's folder of the node's cache, where the runner looks for it.
    assert vol["hostPath"]["path"] == "/var/cache/nightshift/namespaces/physics"
    stage_in = pod["initContainers"][0]
    (mount,) = [m for m in stage_in["volumeMounts"] if m["name"] == "nightshift-cache"]
    assert mount["mountPath"] == "/nightshift/cache/namespaces/physics"
    assert rp.CACHE_PARTITIONS == cache.PARTITIONS
    sc = stage_in["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    # The steps never mount it.
    assert all(m["name"] != "nightshift-cache" for c in pod["containers"]
               for m in c["volumeMounts"])


def test_process_sampling_is_an_opt_in() -> None:
    pod = pod_of({"storage": [S3], "processSampling": True}, **DATA)
    assert pod["shareProcessNamespace"] is True
    assert restricted_violations(pod) == []  # allowed by the profile, but shown to steps


def test_interleaved_outputs_need_the_steps_processes() -> None:
    data = {**DATA, "outputs": [{"storage": "raw", "path": "out/{item}/",
                                 "mode": "interleave"}]}
    assert pod_of({"storage": [S3]}, **data)["shareProcessNamespace"] is True


def _plan_with(runner_image: str | None, allowed: tuple[str, ...] = ()) -> Any:
    run = make_run([{"name": "a", "image": "busybox:1.36", "forEach": {"items": ["x"]},
                     "steps": [{"name": "main", "command": ["true"]}],
                     "inputs": [{"storage": "raw", "path": "{item}"}]}],
                   storage=[S3], **({"runnerImage": runner_image} if runner_image else {}))
    p = plan(Observed(run=run, jobs=[], items=items_for(run, "a", count=1),
                      failure_samples={}, now=T0, runner_image="nightshift-runner:1.0",
                      runner_images=allowed))
    return p, cond.find(p.status["conditions"], cond.INVALID)


def test_runner_image_overrides_only_from_the_allow_list() -> None:
    p, invalid = _plan_with("evil.example/runner:latest")
    assert p.apply == [] and p.status["phase"] == "Failed"
    assert invalid is not None and invalid["message"].startswith(
        "spec.runnerImage: 'evil.example/runner:latest' is not a runner image this operator "
        "allows (nightshift-runner:1.0)")
    p, invalid = _plan_with("registry.example/runner:1.1", ("registry.example/runner:1.1",))
    assert invalid is not None and invalid["status"] == "False"
    (job,) = [m for m in p.apply if m["kind"] == "Job"]
    images = {c["image"] for c in job["spec"]["template"]["spec"]["initContainers"]}
    assert "registry.example/runner:1.1" in images
    p, invalid = _plan_with("nightshift-runner:1.0")  # the operator's own: always fine
    assert invalid is not None and invalid["status"] == "False"


def test_runner_images_setting(monkeypatch: Any) -> None:
    monkeypatch.setenv("NIGHTSHIFT_RUNNER_IMAGES", " a.example/r:1 ,b.example/r:2,")
    assert OperatorConfig.from_env().runner_images == ("a.example/r:1", "b.example/r:2")
    monkeypatch.setenv("NIGHTSHIFT_RUNNER_IMAGES", "a b")
    with pytest.raises(ValueError, match="NIGHTSHIFT_RUNNER_IMAGES"):
        OperatorConfig.from_env()
    monkeypatch.delenv("NIGHTSHIFT_RUNNER_IMAGES")
    assert OperatorConfig.from_env().runner_images == ()


def test_the_runner_is_told_whether_it_can_sample() -> None:
    from nightshift.api import names
    from nightshift.api.runnerwire import RunnerConfig

    def cfg(**spec: Any) -> RunnerConfig:
        stage_in = pod_of({"storage": [S3], **spec}, **DATA)["initContainers"][0]
        env = {e["name"]: e.get("value") for e in stage_in["env"]}
        return RunnerConfig.loads(env[names.ENV_RUNNER_CONFIG])

    assert cfg().sample_processes is False
    assert cfg(processSampling=True).sample_processes is True


def test_claims_and_csi_volumes_get_the_group_configmaps_and_emptydirs_do_not() -> None:
    assert not jobs.owns_files([{"name": "i", "configMap": {"name": "cm"}},
                                {"name": "w", "emptyDir": {}}])
    owned: list[dict[str, Any]] = [{"persistentVolumeClaim": {"claimName": "c"}},
                                   {"csi": {"driver": "d"}},
                                   {"ephemeral": {"volumeClaimTemplate": {}}}]
    for v in owned:
        assert jobs.owns_files([{"name": "x", **v}])
