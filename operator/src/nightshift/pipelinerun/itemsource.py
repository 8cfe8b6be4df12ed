"""Resolving a stage's items and freezing them into ConfigMaps owned by the run.

Resolved once, when the stage is about to start (a later stage may list what an
earlier one wrote), then frozen: restarts and reruns see exactly the same items.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from nightshift.api import credsecret, names
from nightshift.aws.s3 import (
    S3Error,
    S3MissingError,
    S3Target,
    S3TooLargeError,
    S3TooManyError,
    list_keys,
    read_object,
)
from nightshift.config import (
    ENV_S3_ENDPOINTS,
    ENV_S3_OPERATOR_IDENTITY,
    OperatorConfig,
    endpoint_allowed,
)
from nightshift.kube import Kube, KubeError, naming
from nightshift.pipelinerun import binding
from nightshift.pipelinerun import items as render_items
from nightshift.pipelinerun.plantypes import ItemsInfo
from nightshift.pipelinerun.spec import FileSource, PipelineRunSpec, S3Storage, Stage, StorageRef
from nightshift.pipelinerun.validate import MAX_GATHER, check_items

# An item list of 500,000 items of ~100 bytes is 50 MB; an object beyond this is not one.
MAX_FILE_BYTES = 64 * 2**20


class ResolveError(Exception):
    """The items of a stage cannot be resolved now; the message names the field.

    `invalid` marks items that were read but are unusable (none, too many, a line
    break): the spec's source is wrong, not merely not there yet.
    """

    def __init__(self, message: str, invalid: bool = False) -> None:
        super().__init__(message)
        self.invalid = invalid


def frozen_items(kube: Kube, namespace: str, run: str, spec: PipelineRunSpec, uid: str,
                 earlier: dict[str, list[str]] | None = None) -> dict[str, ItemsInfo]:
    """The stages' frozen item lists, from the run's own ConfigMaps (owned by `uid`); an
    earlier same-named run's (item chunks, retry index maps) go in `earlier`, as
    "configmap/<name>" by stage."""
    metas = kube.list_metadata("v1", "ConfigMap", namespace,
                               label_selector=f"{names.LABEL_RUN}={run}")
    by_name = {m["metadata"]["name"]: m["metadata"] for m in metas}
    stages = {st.name for st in spec.stages}
    for name, meta in by_name.items():
        stage = (meta.get("labels") or {}).get(names.LABEL_STAGE)
        if earlier is not None and stage in stages and not render_items.owned_by(meta, uid):
            earlier.setdefault(stage, []).append(f"configmap/{name}")
    by_name = {n: m for n, m in by_name.items() if render_items.owned_by(m, uid)}
    out: dict[str, ItemsInfo] = {}
    for st in spec.stages:
        chunks: list[str] = []
        while (n := render_items.items_configmap_name(run, st.name, len(chunks))) in by_name:
            chunks.append(n)
        if not chunks:
            continue
        ann = by_name[chunks[0]].get("annotations") or {}
        total = int(ann.get(names.ANNOTATION_ITEMS_TOTAL, "0"))
        if sum(int((by_name[c].get("annotations") or {}).get(
                names.ANNOTATION_ITEM_COUNT, "0")) for c in chunks) != total:
            # A pass died between chunks: the missing ones are applied again next time.
            continue
        out[st.name] = ItemsInfo(count=total, configmaps=tuple(chunks))
    return out


def resolve_and_freeze(kube: Kube, run: dict[str, Any], stage_name: str,
                       config: OperatorConfig | None = None) -> None:
    namespace = run["metadata"]["namespace"]
    spec = PipelineRunSpec.model_validate(run["spec"])
    # A fromS3 storage may be an s3 SharedStorage: list what it names.
    shared = {n: kube.get(names.API_VERSION, names.SHAREDSTORAGE, n, namespace)
              for n in binding.referenced(spec)}
    spec = binding.bind(spec, shared, namespace).spec
    stage = next(s for s in spec.stages if s.name == stage_name)
    items = resolve(kube, namespace, spec, stage,
                    config or OperatorConfig.from_env())
    index = next(i for i, s in enumerate(spec.stages) if s.name == stage_name)
    problems = check_items(f"spec.stages[{index}].forEach", items, stage,
                           run["metadata"]["name"])
    if problems:
        raise ResolveError("; ".join(map(str, problems)), invalid=True)
    if any(d.gather for d in stage.inputs):
        check_gathered(frozen_items(kube, namespace, run["metadata"]["name"], spec,
                                    str(run["metadata"].get("uid", ""))),
                       stage, f"spec.stages[{index}]")
    ref = render_items.RunRef.of(run)
    _drop_partial(kube, ref, stage.name)
    fuse = binding.fuse_mounts(stage, {s.name: s for s in spec.storage})
    for cm in render_items.items_configmaps(
            ref, stage.name, items, last_step=stage.steps[-1].name, fuse_mounts=fuse):
        with naming("ConfigMap", cm["metadata"]["name"], "applying"):
            kube.apply(cm)


def _drop_partial(kube: Kube, ref: render_items.RunRef, stage: str) -> None:
    """Delete the chunks an earlier, interrupted freeze of `stage` left (a stage is only
    frozen while its set is incomplete, so no Job mounts them). They are immutable: had
    the source changed since (a new key under the prefix, an edited list), applying the
    new chunks over them would be refused (422) and fail the run in the API's words."""
    ours = {m["metadata"]["name"] for m in kube.list_metadata(
        "v1", "ConfigMap", ref.namespace, label_selector=f"{names.LABEL_RUN}={ref.name}")
        if render_items.owned_by(m["metadata"], ref.uid)}
    n = 0  # chunks are applied in order: what a freeze left is chunks 0..n-1
    while (name := render_items.items_configmap_name(ref.name, stage, n)) in ours:
        with naming("ConfigMap", name, "deleting"):
            kube.delete("v1", "ConfigMap", name, ref.namespace)
        n += 1


def check_gathered(frozen: dict[str, ItemsInfo], stage: Stage, where: str) -> None:
    """Each stage the inputs gather is frozen, with at most MAX_GATHER items (a count the
    spec alone gives for items, range and matrix, but not for the I/O sources)."""
    for j, ref in enumerate(stage.inputs):
        if not ref.gather:
            continue
        field = f"{where}.inputs[{j}].gather"
        info = frozen.get(ref.gather)
        if info is None:
            raise ResolveError(f"{field}: the items of stage {ref.gather!r} are not frozen "
                               "yet; waiting for that stage to start")
        if info.count > MAX_GATHER:
            raise ResolveError(f"{field}: stage {ref.gather!r} has {info.count} items; a pod "
                               f"gathers at most {MAX_GATHER} (split the gathering stage)",
                               invalid=True)


def resolve(kube: Kube, namespace: str, spec: PipelineRunSpec, stage: Stage,
            config: OperatorConfig) -> list[str]:
    fe = stage.for_each
    field = f"spec.stages[{spec.stages.index(stage)}].forEach"
    if fe is None or fe.items is not None or fe.range is not None or fe.matrix is not None:
        return render_items.item_list(fe)
    if fe.from_config_map is not None:
        src = fe.from_config_map
        cm = kube.get("v1", "ConfigMap", src.name, namespace)
        if cm is None:
            raise ResolveError(f"{field}.fromConfigMap: ConfigMap {namespace}/{src.name} "
                               "does not exist; create it (one item per line) or fix the name")
        text = (cm.get("data") or {}).get(src.key)
        if text is None and src.key in (cm.get("binaryData") or {}):
            try:
                text = base64.b64decode(cm["binaryData"][src.key]).decode()
            except UnicodeDecodeError as e:
                raise ResolveError(f"{field}.fromConfigMap.key: ConfigMap {src.name} key "
                                   f"{src.key!r} is binary data, not UTF-8 text ({e}); "
                                   "name a key that holds one item per line",
                                   invalid=True) from None
        if text is None:
            keys = sorted({*(cm.get("data") or {}), *(cm.get("binaryData") or {})})
            raise ResolveError(f"{field}.fromConfigMap.key: ConfigMap {src.name} has no key "
                               f"{src.key!r} (its keys: {', '.join(keys) or 'none'}); "
                               "name one in forEach.fromConfigMap.key (kubectl create "
                               "configmap --from-file names the key after the file)")
        return _lines(text)
    if fe.from_s3 is not None:
        src3 = fe.from_s3
        storage, target = _s3(kube, namespace, spec, src3.storage,
                              f"{field}.fromS3.storage", config)
        prefix = _join(storage.prefix, src3.prefix)
        try:
            keys = list_keys(target, prefix, src3.suffix)
        except S3TooManyError as e:
            raise ResolveError(f"{field}.fromS3: {e}; narrow forEach.fromS3.prefix or "
                               ".suffix, or split the stage", invalid=True) from None
        except S3Error as e:
            raise ResolveError(f"{field}.fromS3: {e}") from None
        if not keys:
            # What was listed, so a bucket, prefix or suffix off by a letter shows.
            raise ResolveError(
                f"{field}.fromS3: s3://{target.bucket}/{prefix}*{src3.suffix} lists no "
                "objects, and a stage needs at least one item; check the storage's bucket "
                "and prefix and forEach.fromS3.prefix and .suffix (keys are case-sensitive)",
                invalid=True)
        if src3.strip_prefix:
            keys = [k[len(prefix):].lstrip("/") for k in keys]
        return keys
    if fe.from_file is not None:
        return _from_file(kube, namespace, spec, field, fe.from_file, config)
    raise ResolveError(f"{field}: no item source")


def _s3(kube: Kube, namespace: str, spec: PipelineRunSpec, name: str, where: str,
        config: OperatorConfig) -> tuple[S3Storage, S3Target]:
    """The S3 storage `name` and a target signed only as s3_listing_refusal allows."""
    storage = _storage(spec, name, where)
    if storage.s3 is None:
        raise ResolveError(f"{where}: storage {name!r} is not S3")
    refusal = s3_listing_refusal(
        where, storage.name, f"spec.storage[{spec.storage.index(storage)}].s3",
        storage.s3.endpoint, storage.s3.credentials_secret, config)
    if refusal:
        raise ResolveError(refusal)
    try:
        return storage.s3, s3_target(kube, namespace, storage, where,
                                     config.s3_operator_identity)
    except S3Error as e:
        raise ResolveError(f"{where}: {e}") from None


def _from_file(kube: Kube, namespace: str, spec: PipelineRunSpec, field: str,
               src: FileSource, config: OperatorConfig) -> list[str]:
    """One item per non-empty line (blanks around it stripped, CRLF files too)."""
    s3, target = _s3(kube, namespace, spec, src.storage, f"{field}.fromFile.storage", config)
    key = _join(s3.prefix, src.path)
    try:
        data = read_object(target, key, MAX_FILE_BYTES)
    except S3MissingError as e:
        # Like a failed listing: the stage waits, the object may still be written.
        raise ResolveError(f"{field}.fromFile.path: {e}; write it (one item per line) or "
                           "fix the path") from None
    except S3TooLargeError as e:
        raise ResolveError(f"{field}.fromFile.path: {e}; split the stage", invalid=True
                           ) from None
    except S3Error as e:
        raise ResolveError(f"{field}.fromFile: {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ResolveError(f"{field}.fromFile.path: s3://{target.bucket}/{key} is not UTF-8 "
                           f"text ({e})", invalid=True) from None
    return _lines(text)


def _lines(text: str) -> list[str]:
    """One item per line: lines end in \\n, \\r\\n or \\r (old Mac exports), nothing
    else (str.splitlines would split on form feeds and Unicode separators too); blanks
    dropped; a UTF-8 byte-order mark (spreadsheets' "CSV UTF-8") not part of the first
    item."""
    text = text.removeprefix("\ufeff")
    return [line.strip() for line in re.split(r"\r\n|\r|\n", text) if line.strip()]


def s3_listing_refusal(field: str, storage: str, storage_field: str, endpoint: str | None,
                       credentials_secret: str | None, config: OperatorConfig) -> str | None:
    """Why the operator must not list this storage for a run, or None when it may.

    The operator acts for tenants: it sends requests only to endpoints its admin
    allowed (else a run could make it call any URL, cloud metadata included), and
    signs them only with the run's own keys, or with its own identity where the admin
    allowed that (else a run could list any bucket the operator can read).
    """
    if endpoint and not endpoint_allowed(endpoint, config.s3_endpoints):
        allowed = ", ".join(config.s3_endpoints) or "none: only AWS's own endpoints"
        return (f"{field}: storage {storage!r} is at {endpoint} ({storage_field}.endpoint), "
                f"which this operator does not contact (allowed: {allowed}); ask the "
                f"cluster admin to add it to {ENV_S3_ENDPOINTS}, or list the items "
                "yourself and use forEach.fromConfigMap")
    if not credentials_secret and not config.s3_operator_identity:
        return (f"{field}: storage {storage!r} has no credentialsSecret, and this operator "
                f"does not list S3 with its own identity; set {storage_field}."
                "credentialsSecret to a Secret with AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY that can list the bucket, or ask the cluster admin "
                f"to set {ENV_S3_OPERATOR_IDENTITY}=true")
    return None


def _storage(spec: PipelineRunSpec, name: str, field: str) -> StorageRef:
    for s in spec.storage:
        if s.name == name:
            return s
    raise ResolveError(f"{field}: no storage named {name!r} in spec.storage")


def _join(a: str, b: str) -> str:
    if not a:
        return b
    return a.rstrip("/") + "/" + b.lstrip("/") if b else a


def s3_target(kube: Kube, namespace: str, storage: StorageRef, field: str,
              operator_identity: bool = False) -> S3Target:
    """The listing's target and keys; no keys only when s3_listing_refusal allowed that."""
    assert storage.s3 is not None  # noqa: S101  (invariant for mypy: callers pass s3 storages)
    s3 = storage.s3
    access = secret = None
    if s3.credentials_secret:
        try:
            sec = kube.get("v1", "Secret", s3.credentials_secret, namespace)
        except KubeError as e:
            if e.status != 403:
                raise
            # RBAC, not the run: the admin's grant is picked up on a later pass, so the
            # stage waits (a refusal would end the run for good).
            raise ResolveError(
                f"{field}: storage {storage.name!r}: the operator may not read Secret "
                f"{s3.credentials_secret} ({e.status} {e.reason}); a cluster admin grants "
                "it by name in the collaboration chart's operator.secretNames (or with "
                "the operator chart's rbac.readSecrets)") from None
        # Not invalid: the Secret can be fixed in place, and a later pass reads it again.
        if why := credsecret.problem(sec, s3.credentials_secret):
            raise ResolveError(f"{field}: storage {storage.name!r}: {why}")
        assert sec is not None  # noqa: S101  (problem() said so otherwise)
        access, secret = credsecret.keys_of(sec)
    return S3Target(bucket=s3.bucket, region=s3.region, endpoint=s3.endpoint,
                    access_key=access, secret_key=secret,
                    operator_identity=operator_identity and not s3.credentials_secret)
