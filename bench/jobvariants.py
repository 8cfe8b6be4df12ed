"""The Jobs the fan-out benches time: the operator's own render, and it minus features.

Both benches start from the Job the operator renders for a one-stage PipelineRun
(nightshift.pipelinerun.jobs.render_job, the code the operator runs), so a change to
the renderer changes what is measured: the "bare" Job is that Job with every feature
removed, not a hand-written copy that could drift.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobbench import POOL, testbed

from nightshift.api import names
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import jobs, rangeitem
from nightshift.pipelinerun.spec import PipelineRunSpec

DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"


def on_real_node(job: dict[str, Any]) -> dict[str, Any]:
    """The same Job, placed on the local cluster's real node instead of the bench pool."""
    cfg = testbed("nodeconfig")
    pod = _pod(job)
    pod["nodeSelector"] = {cfg.NODE_LABEL[0]: cfg.NODE_LABEL[1]}
    taint = cfg.NODE_TAINT
    pod["tolerations"] = [{"key": taint["key"], "operator": "Equal", "value": taint["value"],
                           "effect": taint["effect"]}]
    return job


def kwok_task(seconds: float) -> dict[str, str]:
    """Pod annotations for a task of exactly `seconds` once Running (KWOK's pod-complete)."""
    d = f"{seconds:g}s"
    return {DELAY: d, JITTER: d}


def stage(n: int, task_s: float, **extra: Any) -> dict[str, Any]:
    """The one stage both benches run: n items, one step, the bench pool."""
    return {
        "name": "items", "pool": POOL, "image": "busybox:1.36",
        "forEach": {"range": {"from": 0, "to": n - 1, "format": "item-{:06d}"}},
        "steps": [{"name": "main", "command": ["true"]}],
        "parallelism": min(n, 5000), "retries": {"perItem": 3},
        "tolerateFailedItems": n // 10, "podAnnotations": kwok_task(task_s),
        **extra,
    }


def rendered_job(n: int, namespace: str, task_s: float, virtual_cluster: str | None = None,
                 **stage_extra: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The operator's own Job for stage(n) (no owner: no PipelineRun exists) and its items."""
    body: dict[str, Any] = {"stages": [stage(n, task_s, **stage_extra)]}
    if virtual_cluster:
        body["virtualCluster"] = virtual_cluster
    spec = PipelineRunSpec.model_validate(body)
    st = spec.stages[0]
    run = it.RunRef(name="fan", namespace=namespace, uid="bench")
    cms = it.items_configmaps(run, st.name, it.item_list(st.for_each), last_step=st.steps[-1].name)
    job = jobs.render_job(
        run=run, spec=spec, stage=st, attempt=0, completions=n,
        item_configmaps=[c["metadata"]["name"] for c in cms],
        parallelism=st.parallelism or n, suspend=False, runner_image="nightshift-runner:dev")
    for obj in (job, *cms):
        obj["metadata"].pop("ownerReferences", None)
    return job, cms


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    pod = _pod(job)
    return [*pod.get("initContainers", []), *pod["containers"]]


def _drop_volume(*kinds: str) -> Callable[[dict[str, Any]], None]:
    """Remove the pod's volumes of these kinds ("projected", "emptyDir") and their mounts.

    By kind, not name: the volume names are the renderer's to change.
    """
    def drop(job: dict[str, Any]) -> None:
        pod = _pod(job)
        gone = {v["name"] for v in pod.get("volumes", []) if any(k in v for k in kinds)}
        pod["volumes"] = [v for v in pod.get("volumes", []) if v["name"] not in gone]
        if not pod["volumes"]:
            del pod["volumes"]
        for c in _containers(job):
            c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] not in gone]
            if not c["volumeMounts"]:
                del c["volumeMounts"]
    return drop


def _drop_failure_policy(job: dict[str, Any]) -> None:
    job["spec"].pop("podFailurePolicy", None)


def _drop_replacement(job: dict[str, Any]) -> None:
    # With a podFailurePolicy the API defaults (and only allows) Failed anyway.
    job["spec"].pop("podReplacementPolicy", None)


def _drop_per_index(job: dict[str, Any]) -> None:
    job["spec"].pop("backoffLimitPerIndex", None)
    job["spec"].pop("maxFailedIndexes", None)


def _drop_labels(job: dict[str, Any]) -> None:
    # The selector goes with the labels it selects on: the API server then generates
    # one, and puts its four labels (job-name, controller-uid, each twice) on every pod,
    # as on any Job a user writes.
    job["metadata"].pop("labels", None)
    job["spec"]["template"]["metadata"].pop("labels", None)
    job["spec"].pop("manualSelector", None)
    job["spec"].pop("selector", None)


def _drop_annotations(job: dict[str, Any]) -> None:
    # Only ours: the KWOK task duration is the workload, every variant keeps it.
    ann = job["spec"]["template"]["metadata"].get("annotations", {})
    for k in [k for k in ann if not k.endswith(".stage.kwok.x-k8s.io/delay")
              and not k.endswith(".stage.kwok.x-k8s.io/jitter-delay")]:
        del ann[k]


def _drop_wrapper(job: dict[str, Any]) -> None:
    # run.sh from the items volume, or a range stage's inline wrapper (rangeitem.py).
    for c in _containers(job):
        cmd = c["command"]
        if "--" in cmd and (cmd[:2] == ["/bin/sh", f"{names.MOUNT_ITEMS}/{names.RUN_SH_KEY}"]
                            or cmd[:3] == ["/bin/sh", "-c", rangeitem.RANGE_SH]):
            c["command"] = cmd[cmd.index("--") + 1:]


def _drop_env(job: dict[str, Any]) -> None:
    for c in _containers(job):
        c.pop("env", None)


def _drop_security(job: dict[str, Any]) -> None:
    _pod(job).pop("securityContext", None)
    for c in _containers(job):
        c.pop("securityContext", None)


def _drop_no_token(job: dict[str, Any]) -> None:
    # The bare Job is what a user would write: it gets the default account's token.
    _pod(job).pop("automountServiceAccountToken", None)


def _drop_service_links(job: dict[str, Any]) -> None:
    _pod(job).pop("enableServiceLinks", None)


def _drop_termination_message(job: dict[str, Any]) -> None:
    # A Job a user writes keeps the API's default, File.
    for c in _containers(job):
        c.pop("terminationMessagePolicy", None)


def _drop_resources(job: dict[str, Any]) -> None:
    for c in _containers(job):
        c.pop("resources", None)


def _drop_affinity(job: dict[str, Any]) -> None:
    _pod(job).pop("affinity", None)


@dataclass(frozen=True)
class Feature:
    name: str
    what: str
    remove: Callable[[dict[str, Any]], None]


# Placement (nodeSelector + toleration of the pool taint) is not here: without it no
# pod reaches the bench nodes, so every variant, the bare one too, keeps it.
FEATURES = [
    Feature("failurePolicy", "podFailurePolicy (Ignore DisruptionTarget)",
            _drop_failure_policy),
    Feature("replacement", "podReplacementPolicy: Failed", _drop_replacement),
    Feature("perIndex", "backoffLimitPerIndex + maxFailedIndexes", _drop_per_index),
    Feature("itemsVolume", "items ConfigMap volume (configMap or projected) + mount",
            _drop_volume("projected", "configMap")),
    Feature("workVolume", "emptyDir work volume + mount", _drop_volume("emptyDir")),
    Feature("labels", "Job and pod labels, and the Job's selector on them (manualSelector)",
            _drop_labels),
    Feature("annotations", "do-not-disrupt annotation", _drop_annotations),
    Feature("wrapper", "the step's wrapper command (run.sh, or a range stage's inline one)",
            _drop_wrapper),
    Feature("env", "NIGHTSHIFT_* env vars", _drop_env),
    Feature("serviceLinks", "enableServiceLinks: false", _drop_service_links),
    Feature("terminationMessage", "terminationMessagePolicy: FallbackToLogsOnError",
            _drop_termination_message),
    Feature("security", "pod and container securityContext (restricted profile)",
            _drop_security),
    Feature("noToken", "automountServiceAccountToken: false (no API token volume)",
            _drop_no_token),
    Feature("resources", "container resources (stage.resources)", _drop_resources),
    Feature("affinity", "virtual-cluster node affinity", _drop_affinity),
]


BY_NAME = {f.name: f for f in FEATURES}


def without(job: dict[str, Any], drop: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    for name in drop:
        BY_NAME[name].remove(out)
    return out


def only(job: dict[str, Any], keep: list[str]) -> dict[str, Any]:
    """The rendered Job with every feature removed except `keep` ([]: the bare Job)."""
    return without(job, [f.name for f in FEATURES if f.name not in keep])

