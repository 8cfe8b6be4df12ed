"""API group, label, annotation and taint names shared by every layer.

One place for these strings so that the renderer, the reconcilers, the runner and
the charts never disagree about a key.
"""

from __future__ import annotations

GROUP = "nightshift.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Kinds and their plurals (the REST resource names).
PIPELINERUN = "PipelineRun"
PIPELINERUNS = "pipelineruns"
VIRTUALCLUSTER = "VirtualCluster"
VIRTUALCLUSTERS = "virtualclusters"
SHAREDSTORAGE = "SharedStorage"
SHAREDSTORAGES = "sharedstorages"

# Labels. `nightshift.io/pool` is the contract between a VirtualCluster (which puts it
# on the nodes its NodePools launch) and a PipelineRun stage (which selects it).
LABEL_POOL = f"{GROUP}/pool"
LABEL_VIRTUAL_CLUSTER = f"{GROUP}/virtual-cluster"
# A VirtualCluster's status.mode when Karpenter makes its nodes (virtualcluster/provider.py).
MODE_KARPENTER = "karpenter"
# NodePools are cluster-scoped: nodes also say which namespace's VirtualCluster they serve.
LABEL_VIRTUAL_CLUSTER_NAMESPACE = f"{GROUP}/virtual-cluster-namespace"
LABEL_RUN = f"{GROUP}/pipeline-run"
LABEL_STAGE = f"{GROUP}/stage"
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_STORAGE = f"{GROUP}/storage"

# Standard recommended labels (app.kubernetes.io/*).
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "nightshift"

# Taint that keeps everything but pipeline pods off a pool's nodes. Its value is the
# pool name, so a stage tolerates exactly the pool it asked for.
TAINT_POOL = LABEL_POOL

# Annotations.
ANNOTATION_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
# On a VirtualCluster or SharedStorage: delete it even while PipelineRuns still use it.
ANNOTATION_FORCE_DELETE = f"{GROUP}/force-delete"
# On a retry Job: the rerun number, so the planner acts once per failed-items rerun.
ANNOTATION_RERUN = f"{GROUP}/rerun-failed"
# On a retry or replacement Job: the original item indexes it does not run (they had
# succeeded when it was created), as ranges. The Job's own map from completion index
# to item, so it holds even when earlier attempts' Jobs are gone.
ANNOTATION_SKIP_ITEMS = f"{GROUP}/skip-items"
# Instead, where that list would not fit in an annotation (about 5,500 scattered
# failures): how many rerun-indexes ConfigMaps hold the Job's exact map, which the
# operator and kubectl nightshift read (pipelinerun/observe.py index_maps).
ANNOTATION_INDEXES_CONFIGMAPS = f"{GROUP}/indexes-configmaps"
# On each items (or rerun indexes) ConfigMap chunk: how many lines it holds, the list
# index of its first line, and the length of the whole list (api/itemlookup.py).
ANNOTATION_ITEM_COUNT = f"{GROUP}/item-count"
ANNOTATION_ITEM_START = f"{GROUP}/item-start"
ANNOTATION_ITEMS_TOTAL = f"{GROUP}/items-total"

# Field manager for server-side apply.
FIELD_MANAGER = "nightshift-operator"

# Finalizers.
FINALIZER_VIRTUAL_CLUSTER = f"{GROUP}/virtual-cluster"
FINALIZER_PLACEMENT_GROUP = f"{GROUP}/placement-group"
FINALIZER_SHARED_STORAGE = f"{GROUP}/shared-storage"

# Environment the runner and every pipeline container see.
ENV_ITEM = "NIGHTSHIFT_ITEM"
ENV_ITEM_INDEX = "NIGHTSHIFT_ITEM_INDEX"
# forEach.matrix: the field names in item order ("source site"); run.sh splits the item
# on "/" and exports each value as ENV_ITEM_FIELD_PREFIX + the field name upper-cased.
ENV_ITEM_FIELDS = "NIGHTSHIFT_ITEM_FIELDS"
ENV_ITEM_FIELD_PREFIX = "NIGHTSHIFT_ITEM_"
ENV_RUN = "NIGHTSHIFT_RUN"
ENV_STAGE = "NIGHTSHIFT_STAGE"
ENV_NAMESPACE = "NIGHTSHIFT_NAMESPACE"
ENV_ITEMS_FILE = "NIGHTSHIFT_ITEMS_FILE"
ENV_SCRATCH = "NIGHTSHIFT_SCRATCH"
ENV_INPUTS = "NIGHTSHIFT_INPUTS"
ENV_OUTPUTS = "NIGHTSHIFT_OUTPUTS"
ENV_ATTEMPT = "NIGHTSHIFT_ATTEMPT"
# The step wrapper commits outputs after the step of this name (pipelinerun/jobs.py).
ENV_LAST_STEP = "NIGHTSHIFT_LAST_STEP"
# The paths (":"-separated) in the steps' containers that must be a node's FUSE mount
# (stages[].mounts of glusterfs and cvmfs storages), from the stage's env file; run.sh
# waits ENV_FUSE_WAIT_S (default FUSE_WAIT_S) for each, then fails the item as
# transient; the runner's stage-in waits as long for its own (runner/mounts.py).
ENV_FUSE_MOUNTS = "NIGHTSHIFT_FUSE_MOUNTS"
ENV_FUSE_WAIT_S = "NIGHTSHIFT_FUSE_WAIT_S"
FUSE_WAIT_S = 120
# The exit code of a transient failure (sysexits' EX_TEMPFAIL), which the stage's
# retries absorb: the runner's (runner/stepsh.py) and run.sh's mount wait.
EX_TEMPFAIL = 75
# Batched stages only (pipelinerun/batch.py): items per pod, the Job's number of
# positions, in-pod retries per item, the permanent exit codes, the index's failed pods
# so far (downward API), and where the per-item markers go (tests override it).
ENV_BATCH = "NIGHTSHIFT_BATCH"
ENV_BATCH_POSITIONS = "NIGHTSHIFT_BATCH_POSITIONS"
ENV_BATCH_RETRIES = "NIGHTSHIFT_BATCH_RETRIES"
ENV_BATCH_PERMANENT = "NIGHTSHIFT_BATCH_PERMANENT_EXIT_CODES"
ENV_BATCH_FAILURES = "NIGHTSHIFT_BATCH_INDEX_FAILURES"
ENV_BATCH_STATE = "NIGHTSHIFT_BATCH_STATE"

# Environment only the runner containers see (pipelinerun/runnerparts.py renders it,
# nightshift.runner reads it; the schema of the JSON is api/runnerwire.py).
ENV_RUNNER_CONFIG = "NIGHTSHIFT_RUNNER_CONFIG"
ENV_POD_NAME = "NIGHTSHIFT_POD_NAME"
ENV_POD_UID = "NIGHTSHIFT_POD_UID"
ENV_NODE_NAME = "NODE_NAME"
# Set by the Job controller in every pod of an Indexed Job.
ENV_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
# ... as an annotation, and a label too (Kubernetes >= 1.28), with the same key.
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The pod condition of a disruption (preemption, eviction, a drain, the kubelet's own
# eviction for node pressure), which the stage Jobs' pod failure policy ignores.
DISRUPTION_TARGET = "DisruptionTarget"

# The runner's volume layout inside every pipeline pod (design for storage/MPI later):
#   /nightshift/items/items      the stage's item list, one per line (ConfigMap)
#   /nightshift/work             the item's scratch: inputs/, outputs/, tmp/ (emptyDir or
#                                node-local RAID0 hostPath when the pool has localDisk)
#   /nightshift/bin              the runner's wrapper script, dropped by the init container
#   /nightshift/cache            node-level whole-file S3 cache (hostPath, shared per node)
#   /nightshift/storage/<name>   a PVC storage the stage reads or writes
#   /nightshift/gather/<stage>   inputs[].gather: that stage's items ConfigMaps (stage-in)
MOUNT_ROOT = "/nightshift"
MOUNT_ITEMS = f"{MOUNT_ROOT}/items"
MOUNT_WORK = f"{MOUNT_ROOT}/work"
MOUNT_BIN = f"{MOUNT_ROOT}/bin"
MOUNT_CACHE = f"{MOUNT_ROOT}/cache"
MOUNT_STORAGE = f"{MOUNT_ROOT}/storage"
MOUNT_GATHER = f"{MOUNT_ROOT}/gather"
MOUNT_INPUTS = f"{MOUNT_WORK}/inputs"
MOUNT_OUTPUTS = f"{MOUNT_WORK}/outputs"
# The runner's step wrapper; run.sh execs the step through it when it is there.
STEP_BINARY = f"{MOUNT_BIN}/step"

# Keys of the items volume (the chunk naming and lookup rules are api/itemlookup.py).
ITEMS_KEY = "items"
INDEXES_KEY = "indexes"  # retry Jobs: completion index -> original item index
RUN_SH_KEY = "run.sh"
# The stage's constant NIGHTSHIFT_* values (ENV_RUN, ENV_STAGE, ...), KEY=value lines in
# the first chunk, which run.sh exports: in every pod's env they would be bytes the API
# server and each watcher pay on every write of every pod (docs/performance.md).
STAGE_ENV_KEY = "stage.env"
ITEMS_FILE = f"{MOUNT_ITEMS}/{ITEMS_KEY}"
# SharedStorage: its PersistentVolumes are cluster-scoped, so they say whose they are.
LABEL_STORAGE_NAMESPACE = f"{GROUP}/storage-namespace"
# On a SharedStorage pod template: a digest of its rendered config, so a change rolls it.
ANNOTATION_CONFIG_HASH = f"{GROUP}/config-hash"
