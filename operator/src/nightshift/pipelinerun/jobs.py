"""One Indexed Job per stage attempt: the whole fan-out in one object.

The Job controller creates, retries and counts the pods; the operator only ever reads
and writes this one object per stage attempt, so its API cost is O(stages).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightshift.api import names, nodeaffinity
from nightshift.pipelinerun import batch as batchmod
from nightshift.pipelinerun import binding, items, rangeitem
from nightshift.pipelinerun import runnerparts as runner
from nightshift.pipelinerun.items import RunRef, job_name
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage

# Job API limit on completions-with-backoffLimitPerIndex before stricter rules apply.
HIGH_COMPLETIONS = 100_000
HIGH_COMPLETIONS_PARALLELISM = 10_000


@dataclass(frozen=True)
class PoolNodes:
    """What placement needs of a stage's VirtualCluster pool, read from the
    VirtualCluster (references.pool_nodes)."""

    # The taints the pool puts on its nodes besides the pool taint (spec.pools[].taints).
    taints: tuple[Mapping[str, Any], ...] = ()
    # Karpenter makes the pool's nodes (status.mode karpenter): only those, which carry
    # the VirtualCluster's labels, are the pool's; unknown (False) keeps hand-labeled ones.
    karpenter: bool = False


NO_POOL = PoolNodes()  # a stage outside a VirtualCluster, or its pool not read


def max_parallelism(completions: int) -> int:
    """The most parallelism the Job API accepts for this many completions."""
    cap = HIGH_COMPLETIONS_PARALLELISM if completions > HIGH_COMPLETIONS else 100_000
    return min(completions, cap)


def pod_failure_policy(stage: Stage) -> dict[str, Any]:
    # Ignore first: a spot interruption, drain or preemption must never use one of the
    # item's retries, even if the step also exited with a "permanent" code on SIGTERM.
    rules: list[dict[str, Any]] = [
        {"action": "Ignore",
         "onPodConditions": [{"type": names.DISRUPTION_TARGET, "status": "True"}]},
    ]
    codes = sorted(set(stage.retries.permanent_exit_codes))
    if codes:
        # No containerName: a step may be an init container or the main one.
        rules.append({"action": "FailIndex",
                      "onExitCodes": {"operator": "In", "values": codes}})
    return {"rules": rules}


def render_job(
    *,
    run: RunRef,
    spec: PipelineRunSpec,
    stage: Stage,
    attempt: int,
    completions: int,
    item_configmaps: Sequence[str],
    indexes_configmaps: Sequence[str] = (),
    parallelism: int,
    suspend: bool,
    runner_image: str,
    rerun: int = 0,
    skip_items: str | None = None,
    map_in_configmaps: bool = False,
    positions: int | None = None,
    gather_configmaps: Mapping[str, Sequence[str]] | None = None,
    pool: PoolNodes = NO_POOL,
) -> dict[str, Any]:
    """The Job for `attempt` of `stage` (0: all items; k > 0: only the listed indexes).

    `positions`: the items this Job runs (its list's length) when the stage is batched;
    `completions` is then the number of batches, batch.completions(positions, K).
    `gather_configmaps`: the items ConfigMaps of each stage the inputs gather.
    `pool`: what placement needs of the stage's VirtualCluster pool.
    """
    name = job_name(run.name, stage.name, attempt)
    labels = {**run.labels(stage.name, "stage"), names.LABEL_ATTEMPT: str(attempt)}
    # Pods carry only the labels that select them; the app.kubernetes.io/* set stays on
    # the Job, each pod's controller. A pod's bytes are paid again on each of its API
    # writes, by the API server and every watcher (docs/performance.md).
    pod_labels = items.attempt_labels(run.name, stage.name, attempt)
    tolerate = stage.tolerate_failed_items
    job_spec: dict[str, Any] = {
        # Our own selector: run, stage and attempt name one Job, so the four labels a
        # generated selector adds to every pod (about 330 of its bytes) buy nothing.
        # The Job controller claims pods by controller reference first: a pod another
        # Job controls (a deleted run's, under the same names) is never taken; only an
        # orphan of this same run, stage and attempt can be adopted, and its items are
        # this Job's.
        "manualSelector": True,
        "selector": {"matchLabels": dict(pod_labels)},
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": min(parallelism, max_parallelism(completions)),
        "backoffLimitPerIndex": stage.retries.per_item,
        "podFailurePolicy": pod_failure_policy(stage),
        # A replacement pod only once the old one is gone, so two pods never write the
        # same item's outputs at once (and the only value allowed with a failure policy).
        "podReplacementPolicy": "Failed",
        "suspend": suspend,
        # No ttlSecondsAfterFinished: the run's status is recomputed from its Jobs.
        "template": _pod_template(run, spec, stage, attempt, pod_labels,
                                  [*item_configmaps, *indexes_configmaps], runner_image,
                                  completions if positions is None else positions,
                                  gather_configmaps or {}, pool),
    }
    if tolerate is not None:
        # In whole batches; the API refuses it above completions (retry Jobs are smaller).
        job_spec["maxFailedIndexes"] = batchmod.max_failed_indexes(tolerate, stage.batch,
                                                                   completions)
    if stage.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = stage.active_deadline_seconds
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": run.namespace,
        "labels": labels,
        "ownerReferences": [run.owner_reference()],
    }
    if attempt:
        # Which rerunFailed value this retry answers, so a lost status write can never
        # turn one request into two retries.
        metadata["annotations"] = {names.ANNOTATION_RERUN: str(rerun)}
        if skip_items is not None:
            # The items this attempt does not run: its own completion-index map.
            metadata["annotations"][names.ANNOTATION_SKIP_ITEMS] = skip_items
        elif map_in_configmaps:
            # Too long for an annotation: the map is the indexes ConfigMaps themselves.
            metadata["annotations"][names.ANNOTATION_INDEXES_CONFIGMAPS] = str(
                len(indexes_configmaps))
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def _pod_template(run: RunRef, spec: PipelineRunSpec, stage: Stage, attempt: int,
                  labels: Mapping[str, str], configmaps: Sequence[str],
                  runner_image: str, positions: int,
                  gather_configmaps: Mapping[str, Sequence[str]],
                  pool: PoolNodes) -> dict[str, Any]:
    storage = {s.name: s for s in spec.storage}
    parts = runner.runner_parts(
        run=run.name,
        namespace=run.namespace,
        stage=stage,
        storage=storage,
        archive=spec.archive,
        runner_image=runner_image,
        items_volume=runner.VOLUME_ITEMS,
        node_cache=spec.node_cache,
        sample_processes=spec.process_sampling,
        gather_configmaps=gather_configmaps,
    ) or runner.RunnerParts()
    base_env = [
        *attempt_env(run, stage, attempt),
        *batchmod.pod_env(stage.batch, positions, stage.retries.per_item,
                          stage.retries.permanent_exit_codes),
        *runner.item_fields_env(stage),
    ]
    # With a runner, its parts own the work volume and its mount; without one, the same
    # emptyDir gives the steps their scratch where a stage has a use for it.
    runner_work = any(v["name"] == runner.VOLUME_WORK for v in parts.volumes)
    own_work = not runner_work and work_volume_needed(stage)
    own_work_mount = ([{"name": runner.VOLUME_WORK, "mountPath": names.MOUNT_WORK}]
                      if own_work else [])
    # stages[].mounts: what the steps see themselves (CVMFS at /cvmfs, a shared volume).
    mount_volumes, stage_mounts = binding.stage_mounts(stage, storage)
    wrapper = range_wrapper(run, stage, attempt, parts, storage)
    # No readOnly: the kubelet mounts configMap and projected volumes read-only
    # whatever the mount says, and each field is bytes in every pod.
    items_mount = ([] if wrapper else
                   [{"name": runner.VOLUME_ITEMS, "mountPath": names.MOUNT_ITEMS}])
    mounts = [
        *items_mount,
        *own_work_mount,
        *parts.step_volume_mounts,
        *stage_mounts,
    ]
    containers = []
    for step in stage.steps:
        c: dict[str, Any] = {
            "name": step.name,
            "image": step.image or stage.image,
            # The wrapper finds the item and replaces {item}, {index} and matrix
            # {<field>} in the step's argv, each argument staying one (never a shell line).
            "command": [*(wrapper or ["/bin/sh", f"{names.MOUNT_ITEMS}/{names.RUN_SH_KEY}",
                                      step.name, "--"]),
                        *step.command, *step.args],
            "env": merge_env(base_env, parts.step_env, stage.env, step.env),
            # Copies: containers sharing dicts would alias in YAML and under mutation.
            **({"volumeMounts": copy.deepcopy(mounts)} if mounts else {}),
            # Steps keep a writable root: user images write where they were built to.
            "securityContext": runner.container_security(),
            **runner.TERMINATION_MESSAGE,
        }
        if not c["env"]:
            del c["env"]
        if stage.image_pull_policy:
            c["imagePullPolicy"] = stage.image_pull_policy
        if resources := step_resources(stage):
            c["resources"] = resources
        containers.append(c)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "initContainers": [*parts.init_containers, *containers[:-1]],
        "containers": containers[-1:],
        "volumes": [
            *([] if wrapper else [items_volume(configmaps)]),
            *([runner.work_volume(stage)] if own_work else []),
            *parts.volumes,
            *mount_volumes,
        ],
        # Thousands of pods in a namespace with many Services need no service env vars.
        "enableServiceLinks": False,
    }
    binding.one_volume_per_claim(pod_spec)
    pod_spec["securityContext"] = pod_security(
        stage, fs_group=bool(parts.init_containers) or owns_files(pod_spec["volumes"]))
    for key in ("initContainers", "volumes"):
        if not pod_spec[key]:
            del pod_spec[key]
    if parts.share_process_namespace:
        pod_spec["shareProcessNamespace"] = True
    pod_spec.update(placement(spec, stage, run.namespace, pool))
    return {"metadata": pod_metadata(stage, labels), "spec": pod_spec}


def range_wrapper(run: RunRef, stage: Stage, attempt: int, parts: runner.RunnerParts,
                  storage: Mapping[str, Any]) -> list[str] | None:
    """The inline wrapper's command for a first attempt of a `range` stage that needs
    nothing else from the items volume and has no placeholder to replace (rangeitem.py),
    or None: run.sh and the volume."""
    each = stage.for_each
    if (attempt or each is None or each.range is None or stage.batch > 1
            or parts != runner.RunnerParts() or binding.fuse_mounts(stage, storage)):
        return None
    argv = (a for step in stage.steps for a in (*step.command, *step.args))
    return rangeitem.inline_argv(each.range, argv, run=run.name, stage=stage.name,
                                 namespace=run.namespace, last_step=stage.steps[-1].name)


def items_volume(configmaps: Sequence[str]) -> dict[str, Any]:
    """The items volume: the one ConfigMap itself, or a projection of the chunks (and a
    retry's indexes), each contributing its own keys to the same directory."""
    if len(configmaps) == 1:
        return {"name": runner.VOLUME_ITEMS, "configMap": {"name": configmaps[0]}}
    return {"name": runner.VOLUME_ITEMS,
            "projected": {"sources": [{"configMap": {"name": n}} for n in configmaps]}}


def attempt_env(run: RunRef, stage: Stage, attempt: int) -> list[dict[str, Any]]:
    """The NIGHTSHIFT_* run identity in a step's env: none on a first attempt, whose
    run.sh exports it from the items volume's stage.env (items.stage_env), so no pod of
    the fan-out carries it; all of it on a retry, whose few pods may run with items
    ConfigMaps an older operator froze before run.sh read that file."""
    if not attempt:
        return []
    env = items.stage_env(run, stage.name, stage.steps[-1].name)
    env[names.ENV_ATTEMPT] = str(attempt)
    return [{"name": k, "value": v} for k, v in env.items()]


def placement(spec: PipelineRunSpec, stage: Stage, namespace: str,
              pool: PoolNodes = NO_POOL) -> dict[str, Any]:
    """The pod-spec fields that put a stage's pods where they belong: its service
    account (or no API token without one), its pool (node selector, the pool taint's
    toleration and one for each of the pool's own taints) and, in a VirtualCluster,
    only that VirtualCluster's nodes. Shared by Jobs and MPIJobs."""
    out: dict[str, Any] = {}
    if stage.service_account_name:
        out["serviceAccountName"] = stage.service_account_name
    else:
        # Without a named identity a step has no use for the namespace's default
        # token (no RBAC reaches it) and should not hold one; leaving it out also
        # takes its projected volume (about 400 bytes as stored) off every pod of the fan-out.
        out["automountServiceAccountToken"] = False
    if stage.pool:
        out["nodeSelector"] = {names.LABEL_POOL: stage.pool}
        out["tolerations"] = [{"key": names.TAINT_POOL, "operator": "Equal",
                               "value": stage.pool, "effect": "NoSchedule"},
                              *map(nodeaffinity.taint_toleration, pool.taints)]
        if spec.virtual_cluster:
            out["affinity"] = nodeaffinity.virtual_cluster_affinity(
                spec.virtual_cluster, namespace, hand_labeled=not pool.karpenter)
    return out


def pod_metadata(stage: Stage, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        # Ours last: a user label must not detach a pod from its run or stage.
        "labels": {**stage.pod_labels, **labels},
        # An item in flight is work lost if Karpenter consolidates its node.
        "annotations": {**stage.pod_annotations, names.ANNOTATION_DO_NOT_DISRUPT: "true"},
    }


def step_resources(stage: Stage) -> dict[str, Any]:
    """Each step's resources: the stage's (steps run one after another, so each may use
    the whole share), plus the scratch size as an ephemeral-storage request.

    On every step, not the pod once: a pod's request is the largest of its init
    containers' and the sum of its regular ones (and sidecars), so one step's request
    is the pod's. Not a limit: a limit would count the steps' logs and writable layers
    too, where the emptyDir's sizeLimit bounds the scratch alone.
    """
    out = copy.deepcopy(stage.resources)
    if stage.scratch is not None:
        requests = out.setdefault("requests", {})
        requests.setdefault("ephemeral-storage", stage.scratch.size)
    return out


def work_volume_needed(stage: Stage) -> bool:
    """Whether a stage without the runner gets the /nightshift/work emptyDir: steps
    that hand files to each other, a declared scratch size (the emptyDir's sizeLimit),
    or a batch's per-item markers. A single step needs none (its container's writable
    layer is on the same disk), and every volume is bytes in every pod."""
    return len(stage.steps) > 1 or stage.scratch is not None or stage.batch > 1


# Volume kinds whose ownership the kubelet sets to the pod's fsGroup. A configMap's
# files are world-readable and an emptyDir is created 0777: neither needs it.
FS_GROUP_VOLUMES = ("persistentVolumeClaim", "ephemeral", "csi")


def owns_files(volumes: Sequence[Mapping[str, Any]]) -> bool:
    return any(kind in v for v in volumes for kind in FS_GROUP_VOLUMES)


def pod_security(stage: Stage, fs_group: bool = True) -> dict[str, Any]:
    """Pod Security "restricted" for every pod: never root (the stage's user, 65532 by
    default), seccomp RuntimeDefault. `fs_group`: the group also owns what the pod's
    volumes support (shared storage; the runner, whose containers may write the work
    volume as another user)."""
    group = stage.run_as_group if stage.run_as_group is not None else stage.run_as_user
    out: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": stage.run_as_user,
        "runAsGroup": group,
    }
    if fs_group:
        out["fsGroup"] = group
        # Only when the volume's root is not the group's already: no recursive chown of
        # a large PVC on every pod start.
        out["fsGroupChangePolicy"] = "OnRootMismatch"
    out["seccompProfile"] = {"type": "RuntimeDefault"}
    return out


def merge_env(*lists: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Env lists merged by name, later lists winning, in first-seen order.

    Duplicate names in a container's env are legal but only the last counts, which
    reads as a bug in `kubectl get -o yaml`; one entry per name is unambiguous.
    """
    merged: dict[str, dict[str, Any]] = {}
    for lst in lists:
        for e in lst:
            merged[e["name"]] = copy.deepcopy(dict(e))
    return list(merged.values())
