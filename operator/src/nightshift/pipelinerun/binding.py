"""A run's `spec.storage` entries that name a SharedStorage, resolved. Pure.

`storage: [{name: raw, sharedStorage: snfactory-raw}]` says "the collaboration's
storage called snfactory-raw", stated once as a SharedStorage; the planner reads the
SharedStorages a run names (pipelinerun/reconcile.py) and `bind` turns each entry into
what the Job renderer and the runner already know:

| SharedStorage type | the entry becomes | pods see it |
|---|---|---|
| s3 | the S3 block (`s3.s3_binding`), the runner config's node cache ceiling | through the runner |
| nfs | the PVC block of its clients' claim (`nfs.storage_ref`) | the kubelet's NFS mount |
| glusterfs | the PVC block of its clients' claim: a PV of the node's FUSE mount | HostToContainer |
| cvmfs | the same, read-only: /cvmfs/<repo> | HostToContainer |

Claims, not hostPath volumes, even for the node mounts: the baseline and restricted Pod
Security Standards refuse hostPath in pipeline pods but admit any claim.

Inputs and outputs of every type go through the runner (a mounted storage at
/nightshift/storage/<name>); `stages[].mounts` shows a storage to the steps
themselves, e.g. a cvmfs one at /cvmfs. A SharedStorage that does not exist (yet), or is
Invalid (nothing of it applied, so its claims never come), is not a spec error of the
run: the stages that need it wait, and the run says so (`missing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from nightshift.api import conditions as cond
from nightshift.api.problems import Problem
from nightshift.pipelinerun.spec import PipelineRunSpec, PvcStorage, Stage, StorageRef
from nightshift.sharedstorage import cvmfs, gluster, nfs
from nightshift.sharedstorage.objects import Storage
from nightshift.sharedstorage.s3 import s3_binding

MOUNT_VOLUME_PREFIX = "nightshift-mount-"
CVMFS_MOUNT = cvmfs.MOUNT_ROOT


class BoundStorage(StorageRef):
    """A spec.storage entry resolved from its SharedStorage (never in the CRD)."""

    # HostToContainer for a node's FUSE mount (Gluster, CVMFS): a remount by the client
    # DaemonSet reaches running pods.
    mount_propagation: str | None = None
    # Outputs and archives are refused (CVMFS is published elsewhere).
    read_only: bool = False
    storage_type: str = ""
    # s3: the SharedStorage's cache.size, the runner's node cache ceiling.
    cache_max_bytes: int | None = None
    # glusterfs, cvmfs: the pools whose nodes mount it (its client DaemonSet's); None: any.
    client_pools: list[str] | None = None
    # glusterfs, cvmfs: the directories, relative to where a pod mounts it, that are the
    # node's FUSE mounts ("" the mount itself; a cvmfs storage's repositories).
    fuse_dirs: list[str] | None = None


@dataclass(frozen=True)
class Binding:
    spec: PipelineRunSpec
    problems: list[Problem] = field(default_factory=list)
    # Each entry whose SharedStorage does not exist: "<field>: <what to do>".
    missing: list[str] = field(default_factory=list)
    # ... and those entries' names (spec.storage[].name).
    missing_entries: frozenset[str] = frozenset()


def referenced(spec: PipelineRunSpec) -> list[str]:
    """The SharedStorage names the run's storage entries refer to."""
    return sorted({s.shared_storage for s in spec.storage if s.shared_storage})


def volume_source(ref: StorageRef) -> dict[str, Any] | None:
    """The pod volume source of a storage mounted into pods, or None (S3)."""
    if ref.pvc is not None:
        return {"persistentVolumeClaim": {"claimName": ref.pvc.claim_name}}
    return None


def mount_propagation(ref: StorageRef) -> str | None:
    return ref.mount_propagation if isinstance(ref, BoundStorage) else None


def bind(spec: PipelineRunSpec, shared: Mapping[str, Mapping[str, Any] | None],
         namespace: str) -> Binding:
    """`spec` with every sharedStorage entry resolved from `shared` (name -> the
    SharedStorage object, None when it does not exist)."""
    out: list[StorageRef] = []
    problems: list[Problem] = []
    missing: list[str] = []
    waiting: set[str] = set()
    for i, ref in enumerate(spec.storage):
        name = ref.shared_storage
        if name is None or ref.s3 is not None or ref.pvc is not None:
            out.append(ref)  # not one (validate says "exactly one of"), or not shared
            continue
        path = f"spec.storage[{i}].sharedStorage"
        obj = shared.get(name)
        if obj is None:
            missing.append(f"{path}: no SharedStorage {name!r} in namespace {namespace}; "
                           "the stages that use it start once it exists (create it, or "
                           "fix the name)")
            waiting.add(ref.name)
            out.append(ref)
            continue
        invalid = _invalid(obj)
        if invalid:
            missing.append(f"{path}: SharedStorage {name!r} is Invalid ({invalid}); the "
                           "stages that use it start once it is fixed (kubectl describe "
                           f"sharedstorage {name} -n {namespace})")
            waiting.add(ref.name)
            out.append(ref)
            continue
        try:
            st = Storage.of(obj)
        except (ValidationError, KeyError) as e:
            problems.append(Problem(path, f"SharedStorage {name!r} cannot be read by this "
                                    f"operator ({e}); check its Invalid condition"))
            out.append(ref)
            continue
        out.append(_bound(ref, st))
    bound = spec.model_copy(update={"storage": out})
    by_name = {s.name: s for s in out}
    for i, stage in enumerate(bound.stages):
        problems += stage_problems(stage, by_name, f"spec.stages[{i}]")
    archive = by_name.get(spec.archive.storage) if spec.archive else None
    if isinstance(archive, BoundStorage) and archive.read_only:
        problems.append(Problem("spec.archive.storage", f"the {archive.storage_type} "
                                f"SharedStorage {archive.shared_storage!r} is read-only: "
                                "keep the task records in another storage"))
    return Binding(bound, problems, missing, frozenset(waiting))


def _invalid(obj: Mapping[str, Any]) -> str:
    """The SharedStorage's Invalid message when it is Invalid and was never valid: the
    operator applied none of its objects, so its claims never come and pods using it
    would only sit Pending. One valid before keeps what it had (appliedGeneration)."""
    status = obj.get("status") or {}
    invalid = cond.find(status.get("conditions"), cond.INVALID)
    if "appliedGeneration" in status or not invalid or invalid.get("status") != cond.TRUE:
        return ""
    return str(invalid.get("message") or invalid.get("reason") or "see its Invalid condition")


def waits(stage: Stage, spec: PipelineRunSpec, missing: frozenset[str]) -> bool:
    """Whether the stage needs a storage whose SharedStorage does not exist."""
    if not missing:
        return False
    used = {d.storage for d in [*stage.inputs, *stage.outputs]}
    used |= {m.storage for m in stage.mounts}
    if stage.for_each is not None and stage.for_each.from_s3 is not None:
        used.add(stage.for_each.from_s3.storage)
    if stage.for_each is not None and stage.for_each.from_file is not None:
        used.add(stage.for_each.from_file.storage)
    if spec.archive is not None:
        used.add(spec.archive.storage)
    return bool(used & missing)


def _bound(ref: StorageRef, st: Storage) -> BoundStorage:
    base = {"name": ref.name, "shared_storage": st.name, "storage_type": st.spec.type}
    if st.spec.type == "s3":
        b = s3_binding(st)
        return BoundStorage(**base, s3=b.storage.s3, cache_max_bytes=b.cache_max_bytes)
    if st.spec.type == "nfs":
        claim = nfs.storage_ref(st).pvc
        assert claim is not None  # noqa: S101  (invariant for mypy: nfs storages have a claim)
        # An export the server gives read-only: writes fail with EROFS, so say so first.
        ro = st.spec.nfs is not None and st.spec.nfs.export_options.access_type == "RO"
        return BoundStorage(**base, pvc=PvcStorage(claim_name=claim.claim_name), read_only=ro)
    if st.spec.type == "glusterfs":
        volume, mount = gluster.pod_volume(st, "/")
        pools = st.spec.glusterfs.clients.pools if st.spec.glusterfs else None
        fuse_dirs = [""]
    else:
        volume, mount = cvmfs.pod_volume(st)
        pools = st.spec.cvmfs.client.pools if st.spec.cvmfs else None
        fuse_dirs = list(st.spec.cvmfs.repositories) if st.spec.cvmfs else []
    claim_name = str(volume["persistentVolumeClaim"]["claimName"])
    return BoundStorage(**base, pvc=PvcStorage(claim_name=claim_name),
                        mount_propagation=mount.get("mountPropagation"),
                        read_only=st.spec.type == "cvmfs", client_pools=pools,
                        fuse_dirs=fuse_dirs)


def off_pool(spec: PipelineRunSpec) -> dict[str, str]:
    """Stages (by name) on a pool whose nodes do not mount a glusterfs or cvmfs storage
    they use (not in its clients' pools: no mounter runs there), and what to change. The
    pod would find no mount on its node (FailedMount, or an empty directory), while the
    storage says Ready. `spec`: bound, its stages' default pools filled in."""
    by_name = {s.name: s for s in spec.storage}
    out: dict[str, str] = {}
    for i, stage in enumerate(spec.stages):
        used = [*(d.storage for d in [*stage.inputs, *stage.outputs]),
                *(m.storage for m in stage.mounts)]
        for name in dict.fromkeys(used):
            ref = by_name.get(name)
            if (stage.pool is None or not isinstance(ref, BoundStorage)
                    or ref.client_pools is None or stage.pool in ref.client_pools):
                continue
            field = "glusterfs.clients" if ref.storage_type == "glusterfs" else "cvmfs.client"
            out[stage.name] = (
                f"spec.stages[{i}].pool: pool '{stage.pool}' is not in SharedStorage "
                f"'{ref.shared_storage}' spec.{field}.pools ({', '.join(ref.client_pools)}), "
                f"so its nodes do not mount '{name}': add the pool there, or run the stage "
                "on one of those; the stage waits until then")
            break
    return out


def stage_problems(stage: Stage, storage: Mapping[str, StorageRef], at: str) -> list[Problem]:
    """What a stage asks of its SharedStorages that their types cannot give."""
    out: list[Problem] = []
    for j, d in enumerate(stage.outputs):
        ref = storage.get(d.storage)
        if isinstance(ref, BoundStorage) and ref.read_only:
            out.append(Problem(f"{at}.outputs[{j}].storage", f"{d.storage!r} is the "
                               f"{ref.storage_type} SharedStorage {ref.shared_storage!r}, "
                               f"read-only{_why_read_only(ref)}: write outputs to another "
                               "storage"))
    for j, m in enumerate(stage.mounts):
        where = f"{at}.mounts[{j}]"
        ref = storage.get(m.storage)
        if ref is None:
            out.append(Problem(f"{where}.storage", f"no storage named {m.storage!r} in "
                               "spec.storage; add it there or fix the name"))
            continue
        if ref.shared_storage and not isinstance(ref, BoundStorage):
            continue  # its SharedStorage is missing: reported (and waited for) elsewhere
        if ref.s3 is not None:
            out.append(Problem(f"{where}.storage", f"{m.storage!r} is S3, which pods do not "
                               "mount: use it in inputs or outputs (through the runner)"))
            continue
        is_cvmfs = isinstance(ref, BoundStorage) and ref.storage_type == "cvmfs"
        if m.mount_path is None and not is_cvmfs:
            out.append(Problem(f"{where}.mountPath", "is required (only a cvmfs "
                               "SharedStorage has a default, /cvmfs): e.g. /data"))
        elif m.mount_path is not None and (not m.mount_path.startswith("/")
                                           or m.mount_path.startswith("/nightshift")):
            out.append(Problem(f"{where}.mountPath", f"{m.mount_path!r} must be an absolute "
                               "path outside /nightshift (the runner's)"))
        elif (m.mount_path is not None and isinstance(ref, BoundStorage)
              and ref.fuse_dirs is not None and _UNLISTED & set(m.mount_path)):
            out.append(Problem(f"{where}.mountPath", f"{m.mount_path!r} has a space, tab, "
                               "newline, backslash or ':', which the wait for the node's "
                               f"{ref.storage_type} mount cannot read (/proc/self/mountinfo "
                               "escapes them; ':' separates its paths): choose a path "
                               "without them, e.g. " + _plain_path(m.mount_path)))
        if isinstance(ref, BoundStorage) and ref.read_only and not m.read_only:
            article = "an" if ref.storage_type == "nfs" else "a"
            out.append(Problem(f"{where}.readOnly", f"{article} {ref.storage_type} SharedStorage "
                               f"is read-only{_why_read_only(ref)}: remove readOnly: false"))
    return out


# mountinfo escapes these (run.sh compares its fields as they are); ":" separates paths.
_UNLISTED = frozenset(" \t\n\\:")


def _plain_path(path: str) -> str:
    return "".join("-" if c in _UNLISTED else c for c in path)


def _why_read_only(ref: BoundStorage) -> str:
    return (" (its spec.nfs.exportOptions.accessType is RO; RW lets pods write)"
            if ref.storage_type == "nfs" else "")


def stage_mounts(stage: Stage, storage: Mapping[str, StorageRef]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, step volumeMounts) of the stage's `mounts`; stage_problems() must
    have found nothing."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for m in stage.mounts:
        ref = storage[m.storage]
        source = volume_source(ref)
        if source is None:
            continue
        vol = (MOUNT_VOLUME_PREFIX + m.storage)[:63].rstrip("-")
        if all(v["name"] != vol for v in volumes):
            volumes.append({"name": vol, **source})
        mount: dict[str, Any] = {"name": vol, "mountPath": m.mount_path or CVMFS_MOUNT,
                                 "readOnly": m.read_only}
        if ref.pvc is not None and ref.pvc.sub_path:
            mount["subPath"] = ref.pvc.sub_path
        if prop := mount_propagation(ref):
            mount["mountPropagation"] = prop
        mounts.append(mount)
    return volumes, mounts


def one_volume_per_claim(pod: dict[str, Any]) -> None:
    """Merge, in place, the pod volumes that name the same claim into the first of them,
    renaming every container's mounts of the others. Two volumes of one claim (a storage
    in outputs and in `stages[].mounts`, two entries of one SharedStorage, two subPaths
    of one PVC) leave the kubelet waiting for the second for ever ("unmounted
    volumes=[...]: context deadline exceeded", kubernetes/kubernetes#51853; seen on the
    local cluster's real node), with no event. The merged source is read-only only when
    every one was; each mount keeps its own readOnly and subPath."""
    first: dict[str, dict[str, Any]] = {}
    renamed: dict[str, str] = {}
    kept = []
    for v in pod.get("volumes", []):
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim is None:
            kept.append(v)
        elif claim not in first:
            first[claim] = v
            kept.append(v)
        else:
            renamed[v["name"]] = first[claim]["name"]
            source = first[claim]["persistentVolumeClaim"]
            if source.get("readOnly") and not v["persistentVolumeClaim"].get("readOnly"):
                merged = {**first[claim], "persistentVolumeClaim": {"claimName": claim}}
                kept[kept.index(first[claim])] = first[claim] = merged
    if not renamed:
        return
    pod["volumes"] = kept
    for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        for m in c.get("volumeMounts", []):
            m["name"] = renamed.get(m["name"], m["name"])


def fuse_mounts(stage: Stage, storage: Mapping[str, StorageRef]) -> list[str]:
    """The paths in the steps' containers that must be a node's FUSE mount: each
    `stages[].mounts` of a glusterfs storage, and each repository under one of a cvmfs
    storage. The directory is there whether or not the node's client mounted the volume
    (it makes it first), so run.sh waits for the mount before the step runs on an empty
    directory (items.RUN_SH). A path with a character mountinfo escapes is refused by
    stage_problems() and left out here."""
    out: list[str] = []
    for m in stage.mounts:
        ref = storage.get(m.storage)
        if not isinstance(ref, BoundStorage) or ref.fuse_dirs is None:
            continue
        root = (m.mount_path or CVMFS_MOUNT).rstrip("/")
        for d in ref.fuse_dirs:
            path = f"{root}/{d}" if d else root or "/"
            if path not in out and not _UNLISTED & set(path):
                out.append(path)
    return out


def cache_max_bytes(stage: Stage, storage: Mapping[str, StorageRef]) -> int | None:
    """The node cache ceiling the stage's S3 SharedStorages ask for (the largest)."""
    sizes = [ref.cache_max_bytes for d in stage.inputs
             if isinstance(ref := storage.get(d.storage), BoundStorage)
             and ref.cache_max_bytes is not None]
    return max(sizes) if sizes else None
