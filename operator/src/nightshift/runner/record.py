"""The task record: one JSON per item at <archive prefix>/<run>/<stage>/<index>.json.

Each attempt overwrites the record (its path is per index, so a consumer finds it
without listing) and carries the earlier attempts in `previousAttempts`, so a failure
that a retry fixed stays visible. The run's status only ever holds per-stage sums.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from nightshift.api import names
from nightshift.aws.s3store import S3Store, denied, http_status, is_retryable
from nightshift.runner.config import ConfigError, Item, RunnerConfig
from nightshift.runner.storageerr import RECORDS_NEED, storage_error, url
from nightshift.runner.store import DirStore

log = logging.getLogger(__name__)

RECORD_VERSION = 1
ENV_IMDS = "NIGHTSHIFT_IMDS_ENDPOINT"  # "" disables IMDS (tests, non-AWS clusters)
IMDS = "http://169.254.169.254"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
TIMEOUT = 0.5  # off AWS, IMDS must not delay the pod


def record_key(cfg: RunnerConfig, item: Item) -> str | None:
    if cfg.archive is None:
        return None
    st = cfg.storage(cfg.archive.storage)
    prefix = cfg.archive.prefix.strip("/")
    return f"{st.prefix}{prefix + '/' if prefix else ''}{cfg.run}/{cfg.stage}/{item.index}.json"


def _imds(endpoint: str) -> dict[str, str | None]:
    # The endpoint comes from the pod's env, and urlopen opens file: and ftp: URLs as
    # readily as http: ones.
    if urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
        raise ValueError(f"{ENV_IMDS}={endpoint!r} is not an http:// or https:// URL")

    def call(path: str, method: str, headers: dict[str, str]) -> str:
        req = urllib.request.Request(f"{endpoint}/latest/{path}", method=method,  # noqa: S310  (scheme checked above)
                                     headers=headers)
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:  # noqa: S310  (scheme checked above)
            return str(r.read().decode())

    token = call("api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})

    def get(path: str) -> str:
        return call(f"meta-data/{path}", "GET", {"X-aws-ec2-metadata-token": token})

    life = get("instance-life-cycle")  # "spot" | "on-demand" (also "scheduled")
    return {"instanceType": get("instance-type"),
            "capacityType": "spot" if life == "spot" else "on-demand",
            "zone": get("placement/availability-zone"), "source": "imds"}


def _node_labels(node: str) -> dict[str, str | None]:
    # Imported here: only this fallback needs the Kubernetes client (kube.py is the one
    # module that talks to the API); stage-in on EC2 never loads it.
    from nightshift.kube import node_labels

    labels = node_labels(node, timeout=2)
    return {"instanceType": labels.get(LABEL_INSTANCE_TYPE),
            "capacityType": labels.get(LABEL_CAPACITY_TYPE),
            "zone": labels.get("topology.kubernetes.io/zone"), "source": "node-labels"}


def node_info(env: dict[str, str] | None = None) -> dict[str, str | None]:
    """Instance and capacity type: IMDS on EC2, else the Node's labels, else nulls with
    `sourceError` saying why each way failed and what gives one (a record whose
    instance type is null would otherwise not say why its cost cannot be known)."""
    env = dict(os.environ) if env is None else env
    info: dict[str, str | None] = {"node": env.get(names.ENV_NODE_NAME), "instanceType": None,
                                   "capacityType": None, "zone": None, "source": None}
    why: list[str] = []
    imds = env.get(ENV_IMDS, IMDS)
    if imds:
        try:
            return info | _imds(imds)
        except Exception as e:  # not on EC2, or the hop limit blocks the pod
            log.debug("IMDS: %s", e)
            why.append(f"IMDS: {_short(e)}")
    node = info["node"]
    if node and "KUBERNETES_SERVICE_HOST" in env and (SA_DIR / "token").exists():
        try:
            return info | _node_labels(node)
        except Exception as e:  # RBAC may not let the pod read its Node
            log.warning("node labels: %s", e)
            why.append(f"the Node's labels: {_short(e)}: bind the pod's ServiceAccount to "
                       "the operator chart's node-reader ClusterRole (the collaboration "
                       "chart's pipelines.nodeReaderClusterRole)")
    elif node:
        why.append("the Node's labels: the pod has no API token: give the stage "
                   "serviceAccountName (the collaboration chart's pipelines account, bound "
                   "to the node reader)")
    if why:
        info["sourceError"] = "; ".join(why)
    return info


def _short(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


class RecordReadError(Exception):
    """The item's last record could not be read, for a fault a retry may clear (S3's 5xx
    or throttling after the store's own retries, a lost connection, an I/O error on a
    mounted archive). Its __cause__ is the storage's error."""


def previous(store: S3Store | DirStore, key: str
             ) -> tuple[dict[str, Any] | None, BaseException | None]:
    """The item's last record, and the read's refusal if it was refused: no s3:GetObject,
    or no such key on a bucket that grants no s3:ListBucket (S3 answers 403 for both;
    `check_readable` after stage-in's own write tells them apart).

    A missing or damaged record is no record (attempt 1). A read that failed for a
    moment raises RecordReadError instead: taken for no record, it numbered the attempt
    1, and this attempt's records then replaced the item's history and its failed
    outputs were saved over those of the earlier attempt 1."""
    try:
        raw = store.get_bytes(key)
    except Exception as e:
        refused = _refused(e)
        if not refused and is_retryable(e):
            raise RecordReadError(
                f"archive ({url(store, key)}): the item's last task record could not be "
                f"read, so this attempt could not be numbered after it: "
                f"{storage_error(e, RECORDS_NEED)}; stage-in exits 75 so that the item "
                f"is tried again (a per-item retry)") from e
        log.warning("previous task record %s: %s", key, e)
        return None, (e if refused else None)
    try:
        return (json.loads(raw) if raw else None), None
    except ValueError as e:  # damaged (not JSON, not UTF-8): must not fail the item
        log.warning("previous task record %s is damaged: %s", key, e)
        return None, None


def check_readable(store: S3Store | DirStore, storage: str, key: str) -> None:
    """Read back the record stage-in just wrote, where reading the last one was refused:
    an archive that takes records but never gives them back numbers every attempt 1 and
    lets each overwrite the last one's failed outputs, so it fails the item, naming the
    grant."""
    try:
        store.get_bytes(key)
    except Exception as e:
        if _refused(e):
            raise RefusedError(
                f"archive ({storage}: {url(store, key)}): task record written but not "
                f"readable, so attempts could not be counted: "
                f"{storage_error(e, RECORDS_NEED)}") from e
        log.warning("reading back task record %s: %s", key, e)


def _refused(e: BaseException) -> bool:
    """The archive refused the pod (S3's 403, a mounted folder's permissions)."""
    return http_status(e) == 403 or denied(e)


def next_attempt(prev: dict[str, Any] | None, env: dict[str, str]) -> int:
    explicit = env.get(names.ENV_ATTEMPT, "")
    if explicit.isdigit():
        return int(explicit)
    return int(prev.get("attempt", 0)) + 1 if prev else 1


def summary(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: rec.get(k) for k in ("attempt", "pod", "node", "start", "end", "exitCode",
                                     "phase", "error")}


def build(cfg: RunnerConfig, item: Item, attempt: int, **fields: Any) -> dict[str, Any]:
    prev = fields.pop("previous", None)
    history = [*prev.get("previousAttempts", []), summary(prev)] if prev else []
    rec: dict[str, Any] = {
        "version": RECORD_VERSION, "run": cfg.run, "namespace": cfg.namespace,
        "stage": cfg.stage, "item": item.value, "index": item.index, "attempt": attempt,
    }
    rec.update(fields)
    rec["previousAttempts"] = history[-10:]
    return rec


def write(store: S3Store | DirStore, key: str, rec: dict[str, Any]) -> None:
    store.put_bytes(key, json.dumps(rec, indent=1, sort_keys=True).encode())


class RefusedError(Exception):
    """The archive did not take the item's first record: what it said, where, and what to
    check. Its __cause__ is the storage's own error (which says whether a retry may help).
    """


def write_running(store: S3Store | DirStore, storage: str, key: str,
                  rec: dict[str, Any]) -> None:
    """Stage-in's record of the attempt it starts (phase "running"), before any step.

    The archive's refusal (a missing s3:PutObject under its prefix, a read-only mount)
    would otherwise show only at the item's end, in the sidecar's log, after the work.
    The record also keeps an attempt a lost pod never finished in the next one's
    `previousAttempts`, and numbers that next attempt after it.
    """
    try:
        write(store, key, rec | {"phase": "running"})
    except ConfigError:
        raise  # a key outside the archive's root (store.ContainmentError): exit 78
    except Exception as e:
        raise RefusedError(f"archive ({storage}: {url(store, key)}): task record not "
                           f"written: {storage_error(e, RECORDS_NEED)}") from e
