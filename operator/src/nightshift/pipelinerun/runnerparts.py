"""The runner's share of a stage's pod: pure, spec in, pod fragments out.

The seam between the Job renderer (pipelinerun/jobs.py) and the task runner
(nightshift.runner): the Job renderer asks for these parts and splices them in
before the step containers.

Pod shape (one pod per item; see docs/data-placement.md for why):
    initContainers: nightshift-stage-in   (runner image) work dirs, bin/step, inputs
                    nightshift-commit     (runner image, restartPolicy: Always) samples
                                          /proc, uploads outputs, writes the task record
                    steps[0..n-2]         (user image) through /nightshift/bin/step
    containers:     steps[n-1]            (user image) through /nightshift/bin/step
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nightshift.api import names
from nightshift.api.problems import Problem
from nightshift.api.runnerwire import (
    DEFAULT_CACHE_BYTES,
    INPUT_MODES,
    KIND_DIR,
    KIND_S3,
    OUTPUT_MODES,
    ArchiveConfig,
    DataConfig,
    RunnerConfig,
    StorageConfig,
    gather_dir,
)
from nightshift.pipelinerun.binding import (
    BoundStorage,
    cache_max_bytes,
    mount_propagation,
    volume_source,
)
from nightshift.pipelinerun.items import items_configmap_name, matrix_fields
from nightshift.pipelinerun.spec import Archive, DataRef, Stage, StorageRef

STAGE_IN_CONTAINER = "nightshift-stage-in"
COMMIT_CONTAINER = "nightshift-commit"
VOLUME_WORK = "nightshift-work"
VOLUME_BIN = "nightshift-bin"
VOLUME_CACHE = "nightshift-cache"
VOLUME_STORAGE_PREFIX = "nightshift-storage-"
VOLUME_ITEMS = "nightshift-items"
VOLUME_GATHER_PREFIX = "nightshift-gather-"
# The node cache's folder: it outlives pods on purpose (shared by a node's pods).
CACHE_HOST_PATH = "/var/cache/nightshift"
# Keys the stage's credentialsSecret must hold.
SECRET_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"  # noqa: S105  (a key's name, not a secret)
SECRET_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105  (a key's name, not a secret)
RUNNER_COMMAND = "nightshift-runner"
# The node cache's per-namespace folders (runner/cache.py PARTITIONS).
CACHE_PARTITIONS = "namespaces"
# The node cache's hostPath folder is created by the kubelet, owned by root: the
# stage-in that fills it runs as root, still without capabilities or escalation.
CACHE_WRITER: dict[str, Any] = {"runAsUser": 0, "runAsNonRoot": False}


# A container that fails without writing its termination message gets its log's last
# lines there instead (the kubelet keeps at most 80 lines or 2,048 bytes): the run's
# failureSamples then show the step's own error, not only its exit code.
TERMINATION_MESSAGE = {"terminationMessagePolicy": "FallbackToLogsOnError"}


def container_security(read_only_root: bool = False) -> dict[str, Any]:
    """Every container Nightshift renders meets Pod Security "restricted" (the pod adds
    runAsNonRoot, its user and seccomp RuntimeDefault). A fresh dict each time: shared
    ones would alias in YAML and under mutation."""
    out: dict[str, Any] = {"allowPrivilegeEscalation": False,
                           "capabilities": {"drop": ["ALL"]}}
    if read_only_root:
        out["readOnlyRootFilesystem"] = True
    return out


@dataclass(frozen=True)
class RunnerParts:
    # Stage-in (a regular init container) then the commit sidecar (an init container
    # with restartPolicy: Always); the Job renderer puts them before the steps.
    init_containers: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    # Added to every step container (env and volume mounts).
    step_env: list[dict[str, Any]] = field(default_factory=list)
    step_volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    share_process_namespace: bool = False


def _storage_volume(name: str) -> str:
    return (VOLUME_STORAGE_PREFIX + name)[:63].rstrip("-")


def _cred_env(index: int) -> tuple[str, str]:
    # By position, not name: storage names need not be valid env var names.
    return f"NIGHTSHIFT_S3_{index}_ACCESS_KEY_ID", f"NIGHTSHIFT_S3_{index}_SECRET_ACCESS_KEY"


def _used(stage: Stage, archive: Archive | None) -> list[str]:
    used = [d.storage for d in [*stage.inputs, *stage.outputs]]
    if archive:
        used.append(archive.storage)
    return list(dict.fromkeys(used))


def _data(d: DataRef, default_mode: str) -> DataConfig:
    return DataConfig(storage=d.storage, path=d.path, mode=d.mode or default_mode,
                      cache=d.cache, local_path=d.local_path, failed_prefix=d.failed_prefix,
                      gather=d.gather or "", required=d.required,
                      optional=d.optional)


def gathered(stage: Stage) -> list[str]:
    """The stages whose items this stage's inputs gather, each once, in input order."""
    return list(dict.fromkeys(d.gather for d in stage.inputs if d.gather))


def item_fields_env(stage: Stage) -> list[dict[str, Any]]:
    """names.ENV_ITEM_FIELDS for a matrix stage: run.sh and the runner split items by it."""
    fields = matrix_fields(stage.for_each)
    return [{"name": names.ENV_ITEM_FIELDS, "value": " ".join(fields)}] if fields else []


def work_volume(stage: Stage) -> dict[str, Any]:
    """The item's scratch: an emptyDir, sized when the stage says how much it needs.

    An emptyDir lives under the kubelet's root, which on a localDisk: raid0 pool is the
    instance-store RAID0 array (Karpenter's instanceStorePolicy RAID0 mounts the
    kubelet's and containerd's directories there), so no hostPath is needed, Pod
    Security "restricted" admits it, and the kubelet removes it with the pod.
    """
    empty_dir: dict[str, Any] = {}
    if stage.scratch is not None:
        empty_dir["sizeLimit"] = stage.scratch.size
    return {"name": VOLUME_WORK, "emptyDir": empty_dir}


def runner_config(*, run: str, namespace: str, stage: Stage,
                  storage: Mapping[str, StorageRef], archive: Archive | None,
                  sample_processes: bool = True,
                  ) -> tuple[RunnerConfig, list[dict[str, Any]]]:
    """The runner's config (names.ENV_RUNNER_CONFIG) and the credential env vars it names."""
    storages: dict[str, StorageConfig] = {}
    cred_env: list[dict[str, Any]] = []
    for i, name in enumerate(_used(stage, archive)):
        ref = storage[name]
        if ref.s3 is not None:
            ak = sk = None
            if ref.s3.credentials_secret:
                ak, sk = _cred_env(i)
                for env_name, key in ((ak, SECRET_ACCESS_KEY_ID), (sk, SECRET_SECRET_ACCESS_KEY)):
                    cred_env.append({"name": env_name, "valueFrom": {"secretKeyRef": {
                        "name": ref.s3.credentials_secret, "key": key}}})
            storages[name] = StorageConfig(
                name=name, kind=KIND_S3, bucket=ref.s3.bucket, prefix=ref.s3.prefix,
                endpoint=ref.s3.endpoint, region=ref.s3.region, access_key_env=ak,
                secret_key_env=sk)
        else:
            bound = ref if isinstance(ref, BoundStorage) else None
            storages[name] = StorageConfig(
                name=name, kind=KIND_DIR, path=f"{names.MOUNT_STORAGE}/{name}",
                fuse=bound is not None and bound.storage_type == "glusterfs",
                fuse_dirs=tuple(bound.fuse_dirs or ()) if bound is not None
                and bound.storage_type == "cvmfs" else ())
    # An s3 SharedStorage states its node cache size; the runner's default otherwise.
    cache = cache_max_bytes(stage, storage) or DEFAULT_CACHE_BYTES
    cfg = RunnerConfig(
        run=run, namespace=namespace, stage=stage.name, storages=storages,
        inputs=[_data(d, INPUT_MODES[0]) for d in stage.inputs],
        outputs=[_data(d, OUTPUT_MODES[0]) for d in stage.outputs],
        archive=ArchiveConfig(archive.storage, archive.prefix) if archive else None,
        cache_max_bytes=cache, sample_processes=sample_processes,
    )
    return cfg, cred_env


def runner_problems(stage: Stage, storage: Mapping[str, StorageRef],
                    archive: Archive | None = None,
                    where: str = "spec.stages[?]") -> list[str]:
    """What the runner cannot do with this stage, as field path: problem, fix. `where`
    is the stage's path (`spec.stages[2]`, api/fieldpath.py)."""
    at = where
    out: list[str] = []
    refs = [("inputs", i, d) for i, d in enumerate(stage.inputs)]
    refs += [("outputs", i, d) for i, d in enumerate(stage.outputs)]
    for kind, i, d in refs:
        path = f"{at}.{kind}[{i}]"
        ref = storage.get(d.storage)
        modes = INPUT_MODES if kind == "inputs" else OUTPUT_MODES
        if d.mode is not None and d.mode not in modes:
            out.append(f"{path}.mode: {d.mode!r} is not one of {', '.join(modes)}")
        if ref is None:
            out.append(f"{path}.storage: no storage named {d.storage!r} in spec.storage; "
                       f"add it there or name one of: {', '.join(sorted(storage)) or 'none'}")
            continue
        if ref.s3 is None and volume_source(ref) is None:
            if ref.shared_storage:
                continue  # its SharedStorage is missing: the run waits for it (binding.py)
            out.append(f"{path}.storage: storage {d.storage!r} has neither s3 nor pvc")
        if kind == "inputs" and d.mode == "stream" and ref.s3 is not None:
            out.append(f"{path}.mode: stream from S3 storage {d.storage!r} is not supported "
                       "yet; use mode: stage (downloaded to local scratch through the node "
                       "cache) or a PVC storage for streaming")
        fields = matrix_fields(stage.for_each)
        if kind == "outputs" and stage.for_each is not None and "{item}" not in d.path \
                and "{index}" not in d.path \
                and not (fields and all(f"{{{f}}}" in d.path for f in fields)):
            out.append(f"{path}.path: {d.path!r} has no {{item}}: every item would commit "
                       "to (and overwrite the _SUCCESS manifest of) the same prefix; put "
                       "{item} in the path, e.g. out/{item}/")
        if d.local_path.startswith("/") or ".." in d.local_path.split("/"):
            out.append(f"{path}.localPath: {d.local_path!r} must be a relative path inside "
                       f"the item's {kind}/ directory")
    if archive is not None and archive.storage not in storage:
        out.append(f"spec.archive.storage: no storage named {archive.storage!r} in spec.storage")
    return out


def output_overlaps(stage: Stage, where: str = "spec.stages[?]") -> list[str]:
    """Outputs that would commit the same files twice, as field path: problem, fix.

    A localPath inside another's ("" is all of outputs/): each output commits every file
    under its directory, so the inner one's files would go to both places. A path (on
    the same storage) equal to or inside another's: the two commits share a prefix, and
    the last `_SUCCESS` written would list only its own files, so the next stage would
    never read the other's."""
    local = [(i, _as_dir(d.local_path)) for i, d in enumerate(stage.outputs)
             if not (d.local_path.startswith("/") or ".." in d.local_path.split("/"))]
    remote = [(i, f"{d.storage}:{_as_dir(d.path)}") for i, d in enumerate(stage.outputs)]
    out = []
    for name, attr, dirs, why in (
            ("localPath", "local_path", local, "its files would be committed twice, by "
             "both outputs; give each output a directory of its own under outputs/ (e.g. "
             "outputs[{i}].localPath: main)"),
            ("path", "path", remote, "both would commit to one prefix, and the second _SUCCESS "
             "would list only its own files; give each output a path of its own (e.g. "
             "out/{{item}}/main/ and out/{{item}}/logs/), or make them one output")):
        for j, inner in dirs:
            outer_i = next((i for i, outer in dirs if i != j and (
                inner.startswith(outer) if inner != outer else i < j)), None)
            if outer_i is None:
                continue
            same = "directory" if name == "localPath" else "prefix"
            what = f"is the same {same} as" if dict(dirs)[outer_i] == inner else "lies inside"
            mine, theirs = (getattr(stage.outputs[k], attr) for k in (j, outer_i))
            out.append(f"{where}.outputs[{j}].{name}: {mine!r} {what} outputs[{outer_i}]."
                       f"{name} {theirs!r}, so {why.format(i=outer_i)}")
    return out


def _as_dir(path: str) -> str:
    """A path as a folder to compare by prefix: normalised, "" for the top."""
    n = posixpath.normpath(path or ".")
    return "" if n == "." else n + "/"


def _env(run: str, namespace: str, stage: Stage) -> list[dict[str, Any]]:
    def field_ref(path: str) -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": path}}

    return [
        {"name": names.ENV_RUN, "value": run},
        {"name": names.ENV_STAGE, "value": stage.name},
        {"name": names.ENV_NAMESPACE, "value": namespace},
        {"name": names.ENV_ITEMS_FILE, "value": names.ITEMS_FILE},
        {"name": names.ENV_NODE_NAME, "valueFrom": field_ref("spec.nodeName")},
        {"name": names.ENV_POD_NAME, "valueFrom": field_ref("metadata.name")},
        {"name": names.ENV_POD_UID, "valueFrom": field_ref("metadata.uid")},
        *item_fields_env(stage),
    ]


def runner_parts(
    *,
    run: str,
    namespace: str,
    stage: Stage,
    storage: Mapping[str, StorageRef],
    archive: Archive | None,
    runner_image: str,
    items_volume: str = VOLUME_ITEMS,
    node_cache: bool = False,
    sample_processes: bool = False,
    gather_configmaps: Mapping[str, Sequence[str]] | None = None,
) -> RunnerParts | None:
    """None when the stage needs no runner: no inputs, no outputs, no archive.

    Expects runner_problems() to be empty (the Job validator calls it first).
    `items_volume` is the Job renderer's volume holding the items ConfigMap; the runner
    containers mount it at MOUNT_ITEMS to find their item. `gather_configmaps` holds,
    for each stage the inputs gather, that stage's frozen items ConfigMaps (stage-in
    mounts them at runnerwire.gather_dir(stage)).
    """
    if not stage.inputs and not stage.outputs and archive is None:
        return None
    # Interleaved outputs are uploaded once no step holds them open: the sidecar must see
    # the steps' processes. Otherwise sharing the PID namespace is an opt-in (it lets
    # the steps see the runner's processes, their environment included).
    share = sample_processes or any(d.mode == "interleave" for d in stage.outputs)
    cfg, cred_env = runner_config(run=run, namespace=namespace, stage=stage, storage=storage,
                                  archive=archive, sample_processes=share)
    work_mount: dict[str, Any] = {"name": VOLUME_WORK, "mountPath": names.MOUNT_WORK}
    volumes: list[dict[str, Any]] = [work_volume(stage), {"name": VOLUME_BIN, "emptyDir": {}}]
    items_mount = {"name": items_volume, "mountPath": names.MOUNT_ITEMS, "readOnly": True}
    stage_in_mounts = [work_mount, {"name": VOLUME_BIN, "mountPath": names.MOUNT_BIN},
                       items_mount]
    commit_mounts = [work_mount, items_mount]
    step_mounts = [work_mount, {"name": VOLUME_BIN, "mountPath": names.MOUNT_BIN,
                                "readOnly": True}]
    for g in gathered(stage):
        # Frozen since that stage started; a stage it depends on has started by now.
        cms = (gather_configmaps or {}).get(g) or [items_configmap_name(run, g, 0)]
        vol = (VOLUME_GATHER_PREFIX + g)[:63].rstrip("-")
        volumes.append({"name": vol, "projected": {
            "sources": [{"configMap": {"name": n}} for n in cms]}})
        stage_in_mounts.append({"name": vol, "mountPath": gather_dir(g), "readOnly": True})
    cached = node_cache and any(
        d.cache and storage[d.storage].s3 is not None and (d.mode or "stage") == "stage"
        for d in stage.inputs)
    if cached:
        # Only this namespace's partition of the node's cache (runner/cache.py).
        partition = f"{CACHE_PARTITIONS}/{namespace}"
        volumes.append({"name": VOLUME_CACHE, "hostPath": {
            "path": f"{CACHE_HOST_PATH}/{partition}", "type": "DirectoryOrCreate"}})
        stage_in_mounts.append({"name": VOLUME_CACHE,
                                "mountPath": f"{names.MOUNT_CACHE}/{partition}"})
    # Mounted storages: a PVC, or a SharedStorage's node-mounted directory (binding.py).
    def mounted(name: str) -> bool:
        return volume_source(storage[name]) is not None

    pvc_reads = {d.storage for d in stage.inputs if mounted(d.storage)}
    pvc_streams = {d.storage for d in stage.inputs if mounted(d.storage) and d.mode == "stream"}
    pvc_writes = {d.storage for d in stage.outputs if mounted(d.storage)}
    # A mounted archive is read by stage-in (the item's previous record: its attempt
    # number and earlier attempts) and written by it (a stage-in failure's record).
    archive_mounted = archive.storage if archive and mounted(archive.storage) else None
    if archive_mounted:
        pvc_writes.add(archive_mounted)
    for name in sorted(pvc_reads | pvc_writes):
        vol = _storage_volume(name)
        volumes.append({"name": vol, **(volume_source(storage[name]) or {})})
        mount: dict[str, Any] = {"name": vol, "mountPath": f"{names.MOUNT_STORAGE}/{name}"}
        pvc = storage[name].pvc
        if pvc is not None and pvc.sub_path:
            mount["subPath"] = pvc.sub_path
        if prop := mount_propagation(storage[name]):
            mount["mountPropagation"] = prop
        if name == archive_mounted:
            stage_in_mounts.append(dict(mount))
        elif name in pvc_reads:
            stage_in_mounts.append(mount | {"readOnly": True})
        if name in pvc_streams:
            step_mounts.append(mount | {"readOnly": True})
        if name in pvc_writes:
            commit_mounts.append(dict(mount))
    env = [*_env(run, namespace, stage),
           {"name": names.ENV_RUNNER_CONFIG, "value": cfg.dumps()}, *cred_env]
    base: dict[str, Any] = {"image": runner_image, "env": env, **TERMINATION_MESSAGE}
    if stage.image_pull_policy:
        base["imagePullPolicy"] = stage.image_pull_policy
    stage_in = base | {
        "name": STAGE_IN_CONTAINER, "command": [RUNNER_COMMAND, "stage-in"],
        "volumeMounts": stage_in_mounts,
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
        # The runner writes only to its volumes.
        "securityContext": container_security(True) | (CACHE_WRITER if cached else {}),
    }
    commit = base | {
        "name": COMMIT_CONTAINER, "command": [RUNNER_COMMAND, "commit"],
        "restartPolicy": "Always", "volumeMounts": commit_mounts,
        # Counted in the pod's requests for its whole life: keep it small.
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": container_security(True),
    }
    step_env: list[dict[str, Any]] = [
        {"name": names.ENV_SCRATCH, "value": names.MOUNT_WORK},
        {"name": names.ENV_INPUTS, "value": names.MOUNT_INPUTS},
        {"name": names.ENV_OUTPUTS, "value": names.MOUNT_OUTPUTS},
    ]
    return RunnerParts(
        init_containers=[stage_in, commit],
        volumes=volumes,
        step_env=step_env,
        step_volume_mounts=step_mounts,
        share_process_namespace=share,
    )


def image_problems(wanted: str | None, allowed: Sequence[str]) -> list[Problem]:
    """spec.runnerImage, if set, must be one the operator allows (the admin's list)."""
    if wanted is None or wanted in allowed:
        return []
    return [Problem("spec.runnerImage", f"{wanted!r} is not a runner image this operator "
                    f"allows ({', '.join(allowed)}); remove spec.runnerImage to use the "
                    "operator's, or ask the cluster admin to add it to "
                    "NIGHTSHIFT_RUNNER_IMAGES")]
