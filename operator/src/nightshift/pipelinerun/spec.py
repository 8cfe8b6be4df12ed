"""PipelineRun spec models (group nightshift.io, version v1alpha1).

Mirrors crds/pipelinerun.yaml. Validation that CEL can express lives in the CRD;
what it cannot (cycles, item counts from ConfigMaps or S3) lives in
nightshift.pipelinerun.validate and surfaces as an Invalid condition.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from nightshift.api.models import Spec


class RangeSource(Spec):
    """Items `from`..`to` inclusive, every `step`, each formatted with `format`."""

    from_: int = Field(alias="from")
    to: int
    step: int = 1
    # A Python format string with one positional field, e.g. "night-{:04d}".
    format: str = "{}"


class ConfigMapSource(Spec):
    """Newline-separated items in one key of a ConfigMap in the run's namespace."""

    name: str
    key: str = "items"


class S3Source(Spec):
    """One item per object under a prefix of a storage's bucket, listed once at start."""

    storage: str
    prefix: str = ""
    # Only keys ending with this suffix become items (e.g. ".fits").
    suffix: str = ""
    # Strip the listing prefix from each key before it becomes an item.
    strip_prefix: bool = True


class FileSource(Spec):
    """One item per non-empty line of one S3 object, read once when the stage is ready."""

    storage: str
    # The object's key below the storage's prefix, e.g. "tables/images.txt".
    path: str


class ForEach(Spec):
    """Exactly one item source."""

    items: list[str] | None = None
    range: RangeSource | None = None
    from_config_map: ConfigMapSource | None = None
    from_s3: S3Source | None = None
    # {field: [values]}: the cross product, each item its values joined by "/". The API
    # server keeps an object's keys sorted, so fields run in name order (the first
    # name varies slowest) whatever order the manifest wrote them in.
    matrix: dict[str, list[str]] | None = None
    from_file: FileSource | None = None


class Step(Spec):
    name: str
    command: list[str]
    args: list[str] = []
    env: list[dict[str, Any]] = []
    # The stage's image when None.
    image: str | None = None


class DataRef(Spec):
    """An input or output: a path template (with `{item}`) inside a named storage."""

    storage: str
    path: str
    # inputs: stage | stream; outputs: batch | interleave
    mode: str | None = None
    # Inputs only: use the node-level whole-file cache for S3 objects.
    cache: bool = True
    # Inputs only: an earlier stage; the input is repeated for each of its items, the
    # item in place of {gather} in path, staged at inputs/<localPath>/<that item>/.
    gather: str | None = None
    # Subdirectory of the item's inputs/ (or outputs/) directory this ref maps to;
    # "" is the directory itself. Stream inputs are linked at inputs/<localPath or
    # storage name>.
    local_path: str = ""
    # Outputs only: where a failed item's outputs go for debugging, relative to the
    # storage prefix (then the output path, then attempt-<n>/); "" keeps them nowhere.
    failed_prefix: str = "failed/"
    # Outputs only: an item whose steps succeed but leave this output empty fails (its
    # retries apply), where by default an empty output commits an empty manifest.
    required: bool = False
    # Inputs only: a path that matches no file stages nothing, where by default the item
    # fails at stage-in (exit 66) naming the input.
    optional: bool = False


class Mount(Spec):
    """A storage the stage's steps see as a directory while they run: software (a cvmfs
    SharedStorage, at /cvmfs) or a shared file system (a glusterfs or nfs
    SharedStorage, a PVC) at mountPath."""

    storage: str
    # Default: /cvmfs for a cvmfs SharedStorage (HEP software expects /cvmfs/<repo>);
    # required for every other storage.
    mount_path: str | None = None
    read_only: bool = True


class Retries(Spec):
    per_item: int = 3
    # Exit codes that fail the item at once, without using a retry.
    permanent_exit_codes: list[int] = []


class Mpi(Spec):
    """An MPI stage: one Kubeflow MPIJob (launcher + workers) instead of an Indexed Job."""

    workers: int
    processes_per_worker: int = 1
    threads_per_process: int = 1
    implementation: Literal["OpenMPI", "MPICH", "Intel"] = "OpenMPI"
    # Where the MPI Operator mounts the job's generated SSH keys; the image's user's
    # ~/.ssh (the image must run sshd and ssh as that user).
    ssh_auth_mount_path: str = "/home/mpiuser/.ssh"
    # What each worker runs: an sshd the launcher's mpirun reaches (non-root, so a port
    # above 1024 set in the image's sshd and ssh configs).
    sshd_command: list[str] = ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
    ssh_port: int = 2222
    # Extra mpirun arguments before the program (e.g. ["--mca", "btl", "tcp,self"]).
    mpirun_args: list[str] = []
    # The launcher's own requests (it only runs mpirun); the workers get the stage's.
    launcher_resources: dict[str, Any] = {}


class Scratch(Spec):
    """The item's scratch ($NIGHTSHIFT_SCRATCH, the pod's work emptyDir): `size` is the
    emptyDir's sizeLimit and each step's ephemeral-storage request, so the scheduler
    (and Karpenter) place the pod on a node with that much local disk free."""

    size: str


class Stage(Spec):
    name: str
    depends_on: list[str] = []
    for_each: ForEach | None = None
    pool: str | None = None
    image: str
    image_pull_policy: str | None = None
    steps: list[Step]
    env: list[dict[str, Any]] = []
    resources: dict[str, Any] = {}
    scratch: Scratch | None = None
    parallelism: int | None = None
    inputs: list[DataRef] = []
    outputs: list[DataRef] = []
    mounts: list[Mount] = []
    retries: Retries = Retries()
    # None: every item runs and the stage fails at the end if any failed. N: up to N
    # failed items are tolerated (dependents still start); one more stops the stage.
    tolerate_failed_items: int | None = None
    active_deadline_seconds: int | None = None
    # Items per pod, run one after another (pipelinerun/batch.py); 1: a pod per item.
    batch: int = 1
    # Free-form pod template annotations (e.g. KWOK's simulated task duration).
    pod_annotations: dict[str, str] = {}
    pod_labels: dict[str, str] = {}
    service_account_name: str | None = None
    # Every container of the stage's pods runs as this user and group (never root).
    run_as_user: int = 65532
    run_as_group: int | None = None  # None: the same number as run_as_user
    # An MPI stage (one MPIJob: workers x processes x threads), run once, no forEach.
    mpi: Mpi | None = None


class S3Storage(Spec):
    bucket: str
    prefix: str = ""
    region: str | None = None
    # Endpoint override for S3-compatible stores (versitygw, MinIO, Ceph RGW).
    endpoint: str | None = None
    # Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; omit on EKS with IRSA or
    # Pod Identity.
    credentials_secret: str | None = None


class PvcStorage(Spec):
    claim_name: str
    sub_path: str = ""


class StorageRef(Spec):
    """A storage the stages name: exactly one of an S3 bucket, a PVC, or a
    SharedStorage of the run's namespace by name (pipelinerun/binding.py resolves it)."""

    name: str
    s3: S3Storage | None = None
    pvc: PvcStorage | None = None
    shared_storage: str | None = None


class Launch(Spec):
    # Raise each stage Job's parallelism step by step so no more than this many pods
    # start per minute (staggered spot launches).
    max_pods_per_minute: int | None = None


class Archive(Spec):
    """Where the runner writes one task record per item."""

    storage: str
    prefix: str = "_nightshift"


class PipelineRunSpec(Spec):
    virtual_cluster: str | None = None
    stages: list[Stage]
    storage: list[StorageRef] = []
    archive: Archive | None = None
    launch: Launch = Launch()
    # Per-stage parallelism overrides, by stage name. Stages are immutable once the run
    # exists, so the one knob that must stay mutable lives here.
    parallelism: dict[str, int] = {}
    suspend: bool = False
    cancel: bool = False
    # Bump to rerun only the failed items of a finished run; each value runs once.
    rerun_failed: int = 0
    runner_image: str | None = None
    # Opt-ins that need more than Pod Security "restricted" (docs/security.md):
    # the node's S3 cache (a hostPath; its stage-in runs as root without capabilities),
    # and /proc sampling of the steps by the commit sidecar (a shared PID namespace).
    node_cache: bool = False
    process_sampling: bool = False


Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Suspended", "Cancelled"]
PHASES: tuple[Phase, ...] = ("Pending", "Running", "Succeeded", "Failed", "Suspended", "Cancelled")
TERMINAL_PHASES: frozenset[str] = frozenset({"Succeeded", "Failed", "Cancelled"})
