"""`kubectl nightshift records`: the I/O. Reads a run's task records from its archive.

Per stage: the run's status names the stage's latest Job; its pod template holds the
runner's config (where the archive is) and the credential Secret it names. The records
are fetched by key, concurrently, with a progress bar on stderr; stdout is only the CSV
or JSON, so it can be piped.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from nightshift.api.itemlookup import Item
from nightshift.api.runnerwire import RunnerConfig
from nightshift.cli import plugin_items as pi
from nightshift.cli import plugin_records as prec
from nightshift.kube import Kube
from nightshift.pipelinerun.runnerparts import COMMIT_CONTAINER

WORKERS = 16


def credentials_env(kube: Kube, namespace: str, job: Mapping[str, Any]) -> dict[str, str]:
    """The archive keys, read from the Secret the runner reads them from."""
    env = {}
    for var, (secret, key) in prec.secret_refs(job).items():
        obj = kube.get("v1", "Secret", secret, namespace)
        data = (obj or {}).get("data") or {}
        if key not in data:
            raise prec.RecordsError(f"Secret {namespace}/{secret} has no key {key!r} (the "
                                    "archive's credentials); check the storage's "
                                    "credentialsSecret")
        env[var] = base64.b64decode(data[key]).decode()
    return env


def stage_rows(kube: Kube, namespace: str, run: Mapping[str, Any], record: Mapping[str, Any],
               use_secret: bool, bar: Progress) -> tuple[list[dict[str, Any]], int]:
    """A stage's rows and how many of its items have no record yet."""
    from nightshift.aws.s3store import S3Store, client
    from nightshift.runner.record import record_key

    stage, job_name = str(record.get("name")), record.get("jobName")
    if pi.stage_spec(run, stage).get("mpi"):
        # Its MPIJob runs no runner (no inputs, outputs or archive per item).
        bar.console.print(f"stage {stage}: an mpi stage writes no task records; skipped",
                          style="dim", highlight=False, markup=False)
        return [], 0
    if not job_name:
        return [], int(record.get("total") or 0)
    job = kube.get("batch/v1", "Job", str(job_name), namespace)
    if job is None:
        raise prec.RecordsError(f"stage {stage}: its Job {job_name} is gone (deleted with "
                                "the run's Jobs?); the records are still in the archive "
                                "under <prefix>/<run>/<stage>/<index>.json")
    cfg: RunnerConfig | None = prec.runner_config(job)
    if cfg is None or cfg.archive is None:
        raise prec.RecordsError(f"stage {stage}: the run has no spec.archive, so no task "
                                "records were written; add `archive: {storage: NAME}`")
    storage = cfg.storage(cfg.archive.storage)
    env = credentials_env(kube, namespace, job) if use_secret else {}
    store = S3Store(storage, client(storage, env or None))
    usd = prec.usd_per_second(run.get("status") or {}, stage)
    indexes = list(prec.indexes(record))
    task = bar.add_task(f"{stage:>12}", total=len(indexes))

    def fetch(index: int) -> dict[str, Any] | None:
        key = record_key(cfg, Item(value="", index=index, completion_index=index)) or ""
        try:
            body = store.get_bytes(key)
        except Exception as e:  # botocore's errors: the aws package owns that import
            raise prec.RecordsError(
                f"reading s3://{storage.bucket}/{key} failed: {type(e).__name__}: {e}. "
                "Give credentials that can read the archive (AWS_* env or profile), or "
                "--credentials-from-secret to use the runner's Secret.") from e
        bar.advance(task)
        return None if body is None else prec.row(prec.parse(key, body), usd)

    with ThreadPoolExecutor(WORKERS) as pool:
        got = list(pool.map(fetch, indexes))
    rows = [r for r in got if r is not None]
    return rows, len(got) - len(rows)


def records(kube: Kube, namespace: str, run: Mapping[str, Any], stages: list[dict[str, Any]],
            args: argparse.Namespace, err: Any) -> int:
    rows: list[dict[str, Any]] = []
    missing = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=err, transient=True) as bar:
        for rec in stages:
            got, absent = stage_rows(kube, namespace, run, rec, args.credentials_from_secret,
                                     bar)
            rows += got
            missing += absent
    if missing:
        # Stage-in writes the first record before any step and fails the item if the
        # archive refuses it: an item with none has not started, or failed before that.
        err.print(f"{missing} item(s) have no task record yet: not started; or stage-in "
                  "failed before writing one (the run's failure samples say why); or, with "
                  "the node cache and a mounted archive, still running (stage-in, as root "
                  "there, leaves the record to the sidecar). A record "
                  "at phase running whose item is done is one whose last write failed: the "
                  f"pod's log of container {COMMIT_CONTAINER} says why", markup=False,
                  highlight=False)
    out = sys.stdout
    if args.output == "json":
        json.dump(rows, out, indent=1)
        out.write("\n")
    else:
        prec.write_csv(rows, out)
    return 0
