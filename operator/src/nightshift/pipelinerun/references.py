"""A run's VirtualCluster, pools, ServiceAccounts, Secrets and ConfigMaps, checked
against the cluster. Pure.

A run naming a VirtualCluster that does not exist, or a pool its VirtualCluster lacks,
would otherwise make pods that stay Pending forever with nothing on the run to say why.
Both are waits, not spec errors: the VirtualCluster may be created (or given the pool)
after the run, as a SharedStorage may. The stages that would start wait, and the run's
Progressing condition names the field, the object and the fix.

A VirtualCluster the operator has not reconciled yet (no `status.mode`) is a wait too:
whether Karpenter makes its nodes decides its stage pods' node affinity
(api/nodeaffinity), and a Job's template is never changed once made.

A stage without `pool` in a run with a VirtualCluster runs on the VirtualCluster's first
pool (its default), so its pods land on that VirtualCluster's nodes and tolerate their
taint instead of matching no node at all.

Secrets and ConfigMaps (env valueFrom, an S3 storage's credentialsSecret) are waits too:
a pod whose Secret or key is missing sits in CreateContainerConfigError, which only the
pod says, and an S3 listing without its keys could not start at all. So is a `pvc`
storage's claim: without it the pods stay Pending. The objects are
read by name, once per pass each (`objects`); only their key names reach this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nightshift.api import conditions as cond
from nightshift.api import names
from nightshift.api.quantities import quantity
from nightshift.pipelinerun import podvalues
from nightshift.pipelinerun.jobs import NO_POOL, PoolNodes
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage

REASON = "WaitingForVirtualCluster"
REASON_ACCOUNT = "WaitingForServiceAccount"
REASON_SECRET = "WaitingForSecret"  # noqa: S105  (a condition reason, not a secret)
REASON_CONFIGMAP = "WaitingForConfigMap"
REASON_CLAIM = "WaitingForPersistentVolumeClaim"
REASON_SCRATCH = "WaitingForLocalDisk"
# Karpenter's ephemeral storage for a node without instance-store RAID0 and without a
# root volume in blockDeviceMappings: its AMI families' default volume (AL2023's root,
# Bottlerocket's data volume).
DEFAULT_ROOT_VOLUME = "20Gi"
SECRET, CONFIGMAP = "Secret", "ConfigMap"
# The keys an S3 storage's credentialsSecret must hold (runnerparts renders both).
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass(frozen=True)
class References:
    spec: PipelineRunSpec
    # "<field>: <what is missing and the fix>", for the run's Progressing condition.
    waiting: list[str] = field(default_factory=list)
    # The stages that may not start yet (all of them while the VirtualCluster is absent).
    waiting_stages: frozenset[str] = frozenset()
    # The Progressing reason while waiting.
    reason: str = ""


@dataclass(frozen=True)
class ObjectRef:
    """One reference to a Secret or ConfigMap key: where the spec names it, and which
    stages' pods (or item listing) need it."""

    kind: str  # SECRET or CONFIGMAP
    name: str
    key: str
    # The fields naming the object and the key, e.g.
    # spec.stages[2].steps[0].env[1].valueFrom.secretKeyRef.name (and .key); for a
    # credentialsSecret both are that field (its keys are fixed).
    name_field: str
    key_field: str
    stages: frozenset[str]


def service_accounts(spec: PipelineRunSpec) -> list[str]:
    """The ServiceAccounts the stages name (each is read once per pass)."""
    return sorted({st.service_account_name for st in spec.stages if st.service_account_name})


def objects(spec: PipelineRunSpec) -> list[ObjectRef]:
    """Every Secret and ConfigMap key the run's pods need, in spec order. `optional`
    references are left out: the kubelet starts the pod without them."""
    out: list[ObjectRef] = []
    for i, st in enumerate(spec.stages):
        envs = [(f"spec.stages[{i}].env", st.env)]
        envs += [(f"spec.stages[{i}].steps[{k}].env", step.env)
                 for k, step in enumerate(st.steps)]
        for path, env in envs:
            for j, e in enumerate(env):
                source = e.get("valueFrom") or {}
                for field_name, kind in (("secretKeyRef", SECRET),
                                         ("configMapKeyRef", CONFIGMAP)):
                    ref = source.get(field_name)
                    if isinstance(ref, Mapping) and ref.get("name") and ref.get("key") \
                            and not ref.get("optional"):
                        at = f"{path}[{j}].valueFrom.{field_name}"
                        out.append(ObjectRef(kind, str(ref["name"]), str(ref["key"]),
                                             f"{at}.name", f"{at}.key",
                                             frozenset({st.name})))
    for i, storage in enumerate(spec.storage):
        if storage.s3 is None or not storage.s3.credentials_secret:
            continue
        users = frozenset(st.name for st in spec.stages if storage.name in _storages(st, spec))
        if not users:
            continue
        path = f"spec.storage[{i}].s3.credentialsSecret"
        if storage.shared_storage:
            path = (f"spec.storage[{i}].sharedStorage (SharedStorage "
                    f"'{storage.shared_storage}' s3.credentialsSecret)")
        out += [ObjectRef(SECRET, storage.s3.credentials_secret, key, path, path, users)
                for key in CREDENTIAL_KEYS]
    return out


def _storages(stage: Stage, spec: PipelineRunSpec) -> set[str]:
    """The storages a stage's pods or item listing use (binding.waits' set)."""
    used = {d.storage for d in [*stage.inputs, *stage.outputs]}
    if stage.for_each is not None and stage.for_each.from_s3 is not None:
        used.add(stage.for_each.from_s3.storage)
    if spec.archive is not None:
        used.add(spec.archive.storage)
    used |= {m.storage for m in stage.mounts}
    return used


def claims(spec: PipelineRunSpec) -> list[str]:
    """The PersistentVolumeClaims `pvc` storages name that some stage uses (a
    SharedStorage's own claims are the operator's and not checked)."""
    used = set().union(*(_storages(st, spec) for st in spec.stages)) if spec.stages else set()
    return sorted({s.pvc.claim_name for s in spec.storage
                   if s.pvc is not None and not s.shared_storage and s.name in used})


def _claims(spec: PipelineRunSpec, namespace: str, claims: Mapping[str, bool]) -> References:
    """A pod whose claim is missing stays Pending ("persistentvolumeclaim not found"),
    which only the pod's events say: the stages that use it wait, naming it."""
    waiting, blocked = [], set()
    for i, storage in enumerate(spec.storage):
        if storage.pvc is None or storage.shared_storage \
                or claims.get(storage.pvc.claim_name, True):
            continue
        users = {st.name for st in spec.stages if storage.name in _storages(st, spec)}
        if not users:
            continue
        name = storage.pvc.claim_name
        waiting.append(f"spec.storage[{i}].pvc.claimName: no PersistentVolumeClaim '{name}' "
                       f"in namespace {namespace}: create it (`kubectl get pvc -n "
                       f"{namespace}` lists the claims there), or fix the name; "
                       f"{_who_waits(users)} until it exists")
        blocked |= users
    return References(spec, waiting, frozenset(blocked), REASON_CLAIM if waiting else "")


def names_of(spec: PipelineRunSpec, kind: str) -> list[str]:
    """The distinct Secrets (or ConfigMaps) to read this pass: one GET each."""
    return sorted({r.name for r in objects(spec) if r.kind == kind})


def check(spec: PipelineRunSpec, namespace: str,
          observed: Mapping[str, Mapping[str, Any] | None],
          accounts: Mapping[str, bool] | None = None,
          secrets: Mapping[str, frozenset[str] | None] | None = None,
          config_maps: Mapping[str, frozenset[str] | None] | None = None,
          volume_claims: Mapping[str, bool] | None = None) -> References:
    """`observed`: the VirtualCluster spec.virtualCluster names, by name (None: it does
    not exist); a name not in it was not read, and nothing is checked. `accounts`:
    whether each ServiceAccount the stages name exists (unread ones are not checked).
    `secrets`, `config_maps`: the key names of each object read (None: it does not
    exist); unread ones are not checked. `volume_claims`: whether each claim of
    `claims()` exists."""
    vc = _virtual_cluster(spec, namespace, observed)
    parts = [vc, _scratch(vc.spec, observed), _pool_limits(vc.spec, observed),
             _accounts(spec, namespace, accounts or {}),
             _claims(spec, namespace, volume_claims or {}),
             _objects(spec, namespace, {SECRET: secrets or {}, CONFIGMAP: config_maps or {}})]
    return References(parts[0].spec, [m for p in parts for m in p.waiting],
                      frozenset().union(*(p.waiting_stages for p in parts)),
                      next((p.reason for p in parts if p.reason), ""))


def _objects(spec: PipelineRunSpec, namespace: str,
             observed: Mapping[str, Mapping[str, frozenset[str] | None]]) -> References:
    """A missing Secret or ConfigMap, or a key missing from one, holds the stages that
    need it, naming the field, the object and the command that fixes it."""
    waiting: list[str] = []
    blocked: set[str] = set()
    reasons: list[str] = []
    refs = objects(spec)
    for ref in refs:
        by_name = observed[ref.kind]
        if ref.name not in by_name:
            continue  # not read this pass
        keys = by_name[ref.name]
        noun = "secret generic" if ref.kind == SECRET else "configmap"
        if keys is None:
            wanted = [r.key for r in refs if r.name_field == ref.name_field]
            if ref.key != wanted[0]:
                continue  # one line for the two keys of a credentialsSecret
            literals = " ".join(f"--from-literal={k}=..." for k in wanted)
            waiting.append(f"{ref.name_field}: no {ref.kind} '{ref.name}' in namespace "
                           f"{namespace}: kubectl create {noun} {ref.name} -n {namespace} "
                           f"{literals}, or fix the name; {_who(ref)} until it exists")
        elif ref.key not in keys:
            waiting.append(f"{ref.key_field}: {ref.kind} '{ref.name}' has no key '{ref.key}': "
                           f"add it (kubectl edit {ref.kind.lower()} {ref.name} -n "
                           f"{namespace}), or fix the key; {_who(ref)} until it exists")
        else:
            continue
        blocked |= ref.stages
        reasons.append(REASON_SECRET if ref.kind == SECRET else REASON_CONFIGMAP)
    return References(spec, waiting, frozenset(blocked), reasons[0] if reasons else "")


def _scratch(spec: PipelineRunSpec,
             observed: Mapping[str, Mapping[str, Any] | None]) -> References:
    """A stage's scratch.size larger than the root volume of its pool's nodes can never
    be placed: on AWS, a pool without localDisk keeps the scratch on that volume, and
    Karpenter would find no instance type for the pods, which stay Pending. Checked
    only where the size is known (provider aws, the default or a root volume given);
    a raid0 pool's instance stores are Karpenter's to match."""
    vc = observed.get(spec.virtual_cluster or "")
    if vc is None or (vc.get("status") or {}).get("provider") != "aws":
        return References(spec)
    vc_spec = vc.get("spec") or {}
    pools = _pools(vc)
    root = _root_volume(vc_spec.get("nodeClass") or {})
    waiting, blocked = [], set()
    for i, st in enumerate(spec.stages):
        pool = pools.get(st.pool or "")
        if st.scratch is None or pool is None or pool.get("localDisk") or root is None:
            continue
        size, room = quantity(st.scratch.size), quantity(root)
        if size is None or room is None or size <= room:
            continue
        waiting.append(
            f"spec.stages[{i}].scratch.size: {st.scratch.size} does not fit the nodes of "
            f"pool '{st.pool}' of VirtualCluster '{spec.virtual_cluster}': without "
            f"localDisk their scratch is the root volume ({root}, set by the "
            "VirtualCluster's nodeClass.blockDeviceMappings); give the pool localDisk: "
            "raid0 or a larger root volume, or ask for less; the stage waits until it fits")
        blocked.add(st.name)
    return References(spec, waiting, frozenset(blocked), REASON_SCRATCH if waiting else "")


def _pool_limits(spec: PipelineRunSpec,
                 observed: Mapping[str, Mapping[str, Any] | None]) -> References:
    """A stage whose one pod asks for more CPU or memory than its pool's maxCPU or
    maxMemory can never be placed: the pool's NodePool limit caps the nodes Karpenter may
    launch for it, so no node that fits the pod is ever made, and its pods would stay
    Pending with the scheduler saying only that no node fits."""
    pools = _pools(observed.get(spec.virtual_cluster or ""))
    waiting, blocked = [], set()
    for i, st in enumerate(spec.stages):
        pool = pools.get(st.pool or "") or {}
        asked = podvalues.pod_asks(st.resources)
        for res, limit, what in (("cpu", "maxCPU", "{} CPU"), ("memory", "maxMemory",
                                                               "{} of memory")):
            want, cap = quantity(asked.get(res)), quantity(pool.get(limit))
            if want is None or cap is None or want <= cap:
                continue
            waiting.append(
                f"spec.stages[{i}].resources: one pod asks for {what.format(asked[res])}, more "
                f"than pool '{st.pool}' of VirtualCluster '{spec.virtual_cluster}' may hold "
                f"in all ({limit} {pool[limit]}), so no node for it is ever launched; raise "
                f"the pool's {limit} or ask for less; the stage waits until it fits")
            blocked.add(st.name)
    return References(spec, waiting, frozenset(blocked), REASON if waiting else "")


def _root_volume(node_class: Mapping[str, Any]) -> str | None:
    """The volume Karpenter counts as a node's ephemeral storage, or None when unsure
    (a mapping list without one marked rootVolume)."""
    mappings = node_class.get("blockDeviceMappings") or []
    if not mappings:
        return DEFAULT_ROOT_VOLUME
    for m in mappings:
        if m.get("rootVolume"):
            return str((m.get("ebs") or {}).get("volumeSize") or "") or None
    return None


def _who(ref: ObjectRef) -> str:
    return _who_waits(ref.stages)


def _who_waits(stages: frozenset[str] | set[str]) -> str:
    names = sorted(stages)
    if len(names) == 1:
        return f"stage {names[0]} waits"
    return f"stages {', '.join(names)} wait"


def _accounts(spec: PipelineRunSpec, namespace: str,
              accounts: Mapping[str, bool]) -> References:
    """A Job whose ServiceAccount is missing makes no pod at all (the Job controller's
    events say why, the run would not): the stage waits, naming it."""
    waiting, blocked = [], set()
    for i, st in enumerate(spec.stages):
        name = st.service_account_name
        if name and accounts.get(name, True) is False:
            waiting.append(f"spec.stages[{i}].serviceAccountName: no ServiceAccount '{name}' "
                           f"in namespace {namespace}: kubectl create serviceaccount {name} "
                           f"-n {namespace}, or fix the name; the stage waits until it exists")
            blocked.add(st.name)
    return References(spec, waiting, frozenset(blocked), REASON_ACCOUNT if waiting else "")


# The VirtualCluster's Ready=False reasons under which nothing of it may exist: no
# Karpenter to apply to, or a spec that was never valid (no appliedGeneration; one that
# was keeps its earlier NodePools, which still launch nodes). Its other not-Ready states
# (a NodePool not Ready yet, static pools with no labeled node) may clear by themselves
# or hold only some pools: those stages start, and their pods wait for nodes as usual.
NOTHING_APPLIED = ("Invalid", "ProviderUnavailable")


def _not_working(virtual_cluster: Mapping[str, Any]) -> str:
    """'<reason>: <message>' when the VirtualCluster applied nothing, else ''."""
    conds = (virtual_cluster.get("status") or {}).get("conditions")
    ready = cond.find(conds, cond.READY)
    if not ready or ready.get("status") != cond.FALSE or ready.get("reason") not in NOTHING_APPLIED:
        return ""
    if ready["reason"] == "Invalid" and "appliedGeneration" in virtual_cluster["status"]:
        return ""
    said = ready
    invalid = cond.find(conds, cond.INVALID)
    if ready["reason"] == "Invalid" and invalid and invalid.get("status") == cond.TRUE:
        said = invalid  # its Ready message points at the Invalid condition
    return f"{ready['reason']}: {said.get('message') or said.get('reason') or 'no message'}"


def _virtual_cluster(spec: PipelineRunSpec, namespace: str,
                     observed: Mapping[str, Mapping[str, Any] | None]) -> References:
    vc = spec.virtual_cluster
    if not vc or vc not in observed:
        return References(spec)
    virtual_cluster = observed[vc]
    if virtual_cluster is None:
        return References(spec, [
            f"spec.virtualCluster: no VirtualCluster '{vc}' in namespace {namespace}: "
            f"create it, or name one of `kubectl get virtualclusters -n {namespace}`; "
            "no stage starts until it exists"],
            frozenset(st.name for st in spec.stages), REASON)
    broken = _not_working(virtual_cluster)
    if broken:
        return References(spec, [
            f"spec.virtualCluster: VirtualCluster '{vc}' is not Ready ({broken}): nothing "
            f"was applied for its pools, so no node would come; fix it (kubectl describe "
            f"virtualcluster {vc} -n {namespace}); no stage starts until it is Ready"],
            frozenset(st.name for st in spec.stages), REASON)
    if not (virtual_cluster.get("status") or {}).get("mode"):
        return References(spec, [
            f"spec.virtualCluster: VirtualCluster '{vc}' has no status.mode yet: the "
            "operator has not reconciled it, and its pods' node affinity depends on "
            "whether Karpenter makes its nodes; it is set within seconds of the "
            f"VirtualCluster's creation by an operator watching namespace {namespace} "
            f"(kubectl describe virtualcluster {vc} -n {namespace}); no stage starts "
            "until it is set"],
            frozenset(st.name for st in spec.stages), REASON)
    pools = [str(p.get("name")) for p in
             ((virtual_cluster.get("spec") or {}).get("pools") or []) if p.get("name")]
    waiting: list[str] = []
    blocked: set[str] = set()
    stages = []
    for i, st in enumerate(spec.stages):
        if st.pool is None and pools:
            stages.append(st.model_copy(update={"pool": pools[0]}))
            continue
        if st.pool is not None and st.pool not in pools:
            waiting.append(
                f"spec.stages[{i}].pool: VirtualCluster '{vc}' has no pool '{st.pool}' "
                f"(its pools: {', '.join(pools) or 'none'}): add it to the VirtualCluster's "
                "spec.pools, or cancel this run and create one that names one of its pools "
                "(stages are immutable); the stage waits until it exists")
            blocked.add(st.name)
        stages.append(st)
    return References(spec.model_copy(update={"stages": stages}), waiting, frozenset(blocked),
                      REASON if waiting else "")


def pool_nodes(spec: PipelineRunSpec, observed: Mapping[str, Mapping[str, Any] | None],
               pool: str | None) -> PoolNodes:
    """What jobs.placement needs of spec.virtualCluster's pool `pool`: the taints it puts
    on its nodes besides the pool taint (spec.pools[].taints), which the stage's pods
    tolerate, and whether Karpenter makes its nodes (status.mode)."""
    if not spec.virtual_cluster or not pool:
        return NO_POOL
    vc = observed.get(spec.virtual_cluster)
    taints = _pools(vc).get(pool, {}).get("taints") or []
    return PoolNodes(tuple(t for t in taints if isinstance(t, Mapping) and t.get("key")),
                     karpenter=((vc or {}).get("status") or {}).get("mode") == names.MODE_KARPENTER)


def _pools(vc: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """A VirtualCluster's spec.pools by name ({} for none, or one not read)."""
    return {str(p.get("name")): p for p in ((vc or {}).get("spec") or {}).get("pools") or []}
