"""`nightshift-runner`: the runner image's entry point.

    nightshift-runner stage-in   init container: work dirs, bin/step, inputs, attempt
    nightshift-runner commit     native sidecar: /proc sampling, outputs, task record
    nightshift-runner step-sh    print the step wrapper script (for inspection)

Exit codes of stage-in (an init container failure fails the pod, so these reach the
Job's podFailurePolicy): 75 transient storage trouble (retry), 65 checksum mismatch,
66 an input does not exist, 78 configuration error, 1 anything else.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from pathlib import Path

from nightshift.api import names
from nightshift.aws import s3store as s3io
from nightshift.aws.s3store import S3Store
from nightshift.runner import config, mounts, record, stepsh
from nightshift.runner.commit import utcnow
from nightshift.runner.config import ConfigError, Paths, RunnerConfig
from nightshift.runner.stagein import InputStorageError, stage_in, write_stats
from nightshift.runner.store import ChecksumError, DirStore

log = logging.getLogger("nightshift.runner")

EX_DATAERR = 65
EX_NOINPUT = 66
EX_TEMPFAIL = stepsh.EX_TEMPFAIL
EX_CONFIG = 78


def open_stores(cfg: RunnerConfig, env: dict[str, str]) -> dict[str, S3Store | DirStore]:
    stores: dict[str, S3Store | DirStore] = {}
    for name, st in cfg.storages.items():
        if st.kind == "s3":
            stores[name] = S3Store(st, s3io.client(st, env))
        else:
            stores[name] = DirStore(name, Path(st.path))
    return stores


def _dirs(paths: Paths) -> None:
    for d in (paths.work, paths.inputs, paths.outputs, paths.tmp, paths.state):
        d.mkdir(parents=True, exist_ok=True)
        if d.stat().st_uid != os.getuid():
            # The volume's own root (an emptyDir, world-writable already): only its
            # owner may chmod it, and a non-root runner is not that owner.
            continue
        # The runner may run as root and the steps as any uid: let them write.
        os.chmod(d, 0o777)  # noqa: S103  (the pod's own work dirs; steps run as any uid)


def cmd_stage_in(env: dict[str, str]) -> int:
    paths = config.paths_from_env(env)
    cfg = config.load(env)
    item = config.resolve_item(paths, env)
    _dirs(paths)
    stepsh.install(paths.bin, paths.state)
    stores = open_stores(cfg, env)
    key = record.record_key(cfg, item)
    # FUSE storages first: an archive on one read before its mount came would show no
    # previous record (attempt 1 again), and a record written there would land on the
    # node's own disk, under the mount.
    not_mounted = None
    try:
        mounts.wait(cfg, env)
    except mounts.NotMountedError as e:
        not_mounted = e
    archive = cfg.archive.storage if key and cfg.archive else None
    if archive and not_mounted and cfg.storage(archive).kind == "dir":
        archive = None  # its volume may be the one not mounted: neither read nor written
    try:
        prev, refused = (record.previous(stores[archive], key) if archive and key
                         else (None, None))
    except record.RecordReadError as e:
        # No record written either: it would replace the one that could not be read.
        return _stage_in_failed(EX_TEMPFAIL, str(e))
    if archive and cfg.storage(archive).kind == "dir" and os.geteuid() == 0:
        # Stage-in runs as root only to fill the node cache (runnerparts.CACHE_WRITER).
        # A record or folder it made in a mounted archive would be root's, and the
        # sidecar, as the pod's user, could then write none of the stage's records.
        log.info("archive %s: no record from stage-in (it runs as root for the node "
                 "cache); the sidecar writes the item's record", archive)
        archive = None
    attempt = record.next_attempt(prev, env)
    start = utcnow()
    log.info("item %r (index %d), attempt %d", item.value, item.index, attempt)
    extra: dict[str, object] = {"attempt": attempt, "start": start, "previousRecord": prev,
                                "item": item.value, "index": item.index}
    rc, error = 0, None
    try:
        if not_mounted:
            raise not_mounted
        if archive and key:
            record.write_running(stores[archive], archive, key, record.build(
                cfg, item, attempt, previous=prev, pod=env.get(names.ENV_POD_NAME),
                node=env.get(names.ENV_NODE_NAME), start=start))
            if refused is not None:
                record.check_readable(stores[archive], archive, key)
        stats = stage_in(cfg, paths, item, stores)
        write_stats(paths, stats, extra)
        log.info("staged %d files, %d bytes in %.1fs (cache %d hits, %d misses)",
                 stats.files, stats.bytes, stats.seconds, stats.cache_hits, stats.cache_misses)
        return 0
    except ChecksumError as e:
        rc, error = EX_DATAERR, f"checksum: {e}"
    except FileNotFoundError as e:
        rc, error = EX_NOINPUT, f"missing input: {e}"
    except ConfigError as e:
        rc, error = EX_CONFIG, str(e)
    except mounts.NotMountedError as e:
        rc, error = EX_TEMPFAIL, str(e)
    except (InputStorageError, record.RefusedError) as e:
        rc = EX_TEMPFAIL if e.__cause__ and s3io.is_retryable(e.__cause__) else 1
        error = str(e)
        if isinstance(e, record.RefusedError):
            archive = None  # it has just refused this record: not again for the failure's
    except Exception as e:
        rc = EX_TEMPFAIL if s3io.is_retryable(e) else 1
        error = f"{type(e).__name__}: {e}"
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            # Retried (EX_TEMPFAIL, an OSError): with scratch.size the next pod lands
            # where that much disk is free; without it the same may happen again.
            error += "; " + _disk_full(paths, str(e.filename or ""))
    _stage_in_failed(rc, error)
    if archive and key:
        rec = record.build(cfg, item, attempt, previous=prev, pod=env.get(names.ENV_POD_NAME),
                           **record.node_info(env), start=start, end=utcnow(),
                           phase="stage-in-failed", exitCode=rc, error=error)
        try:
            record.write(stores[archive], key, rec)
        except Exception:
            log.exception("writing task record %s", key)
    return rc


def _stage_in_failed(rc: int, error: str) -> int:
    """Say why stage-in failed, in its log and as the pod's termination message (the
    run's failure sample); returns the exit code."""
    log.error("stage-in failed (exit %d): %s", rc, error)
    termination_message(f"stage-in failed (exit {rc}): {error}")
    return rc


def _disk_full(paths: Paths, filename: str) -> str:
    """Where a stage-in filled a disk, from the file it was writing, and what to set."""
    if filename and Path(filename).is_relative_to(paths.cache):
        return (f"the node cache ({paths.cache}) is full: turn the input's cache off "
                "(inputs[].cache: false), or give the node more disk")
    return (f"the item's scratch filled while staging the inputs into {paths.inputs}: set "
            "spec.stages[].scratch.size to what one item's inputs and work need (the pod "
            "then asks for that much disk)")


def termination_message(text: str, path: Path = Path("/dev/termination-log")) -> None:
    """The one line the run's failureSamples show for this pod. The kubelet creates the
    file in every container; anywhere else (a test, a shell) there is none to write."""
    if path.exists():
        try:
            path.write_text(text[:2000])
        except OSError as e:
            log.warning("could not write the termination message to %s: %s", path, e)


def cmd_commit(env: dict[str, str]) -> int:
    from nightshift.runner.sidecar import Sidecar

    paths = config.paths_from_env(env)
    cfg = config.load(env)
    item = config.resolve_item(paths, env)
    return Sidecar(cfg, paths, item, open_stores(cfg, env), env).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nightshift-runner", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["stage-in", "commit", "step-sh"])
    parser.add_argument("--state-dir", default=None, help="step-sh: state dir to embed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s nightshift-runner %(levelname)s %(message)s")
    logging.getLogger("botocore").setLevel(logging.WARNING)
    env = dict(os.environ)
    try:
        if args.command == "step-sh":
            state = Path(args.state_dir) if args.state_dir else config.paths_from_env(env).state
            sys.stdout.write(stepsh.script(state))
            return 0
        if args.command == "stage-in":
            return cmd_stage_in(env)
        return cmd_commit(env)
    except ConfigError as e:
        log.error("%s", e)
        return EX_CONFIG


if __name__ == "__main__":
    sys.exit(main())
