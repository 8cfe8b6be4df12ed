"""Whether a node's FUSE mount is really there before the runner uses it.

A glusterfs SharedStorage reaches pods as a PersistentVolume of the node directory its
client DaemonSet mounts the volume on. That directory exists whether or not the mount
does (the client makes it before mounting), so on a node whose client has not mounted
the volume, or lost it, the pod would read an empty directory and write its outputs to
the node's own disk: lost to every other node, and committed as if all were well. The
runner's stage-in and commit sidecar therefore check, from /proc/self/mountinfo, that
each such storage their container mounts is on a FUSE file system, and fail the item
(retryable, exit 75) when it is not. Stage-in first waits up to WAIT_S for it: on a new
node the pod may start before the client mounts, and the mount's HostToContainer
propagation brings it into the running container (run.sh waits the same way for the
steps' own mounts, pipelinerun/fusewait.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from nightshift.api import names
from nightshift.runner.config import RunnerConfig

MOUNTINFO = Path("/proc/self/mountinfo")
log = logging.getLogger(__name__)
WAIT_S = float(names.FUSE_WAIT_S)  # as long as run.sh waits for the steps' mounts
WAIT_INTERVAL_S = 2.0


class NotMountedError(RuntimeError):
    """A storage the runner needs is not mounted on this node."""


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo (octal).
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def fs_type(path: str, mountinfo: str) -> str:
    """The file system type of the mount `path` is on: the entry with the longest mount
    point that is `path` or above it, the last one listed (a later mount on the same
    point hides the earlier)."""
    best, best_len = "", -1
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        point = _unescape(fields[4]).rstrip("/") or "/"
        if point not in ("/", path) and not path.startswith(point + "/"):
            continue
        fstype = line.split(" - ", 1)[1].split(" ")[0]
        if len(point) >= best_len:
            best, best_len = fstype, len(point)
    return best


def check(cfg: RunnerConfig, env: Mapping[str, str], mountinfo: str | None = None) -> None:
    """Raise NotMountedError for the first FUSE storage whose path (a glusterfs one's),
    or one of whose directories (a cvmfs one's repositories), is not on a FUSE mount."""
    fuse = [st for st in cfg.storages.values() if st.fuse or st.fuse_dirs]
    if not fuse:
        return
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    for st in fuse:
        if mountinfo is None and not Path(st.path).is_dir():
            continue  # not mounted in this container (stage-in mounts only what it reads)
        root = st.path.rstrip("/")
        for path in [root] if st.fuse else [f"{root}/{d}" for d in st.fuse_dirs]:
            _check_one(st.name, path, text, env)


def _check_one(storage: str, path: str, mountinfo: str, env: Mapping[str, str]) -> None:
    got = fs_type(path, mountinfo)
    if not got.startswith("fuse"):
        node = env.get("NODE_NAME") or "this node"
        raise NotMountedError(
            f"storage {storage!r}: {path} is not the volume's FUSE mount on node {node} "
            f"(it is on {got or 'an unknown file system'}): the SharedStorage's client "
            "there has not mounted it, and the item would read an empty directory or "
            "leave its files on the node's own disk; the item is retried (see the "
            "SharedStorage's status.clients)")


def wait(cfg: RunnerConfig, env: Mapping[str, str], timeout: float = WAIT_S,
         sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> None:
    """check() until it passes, or raise its NotMountedError after `timeout` seconds."""
    end, said = clock() + timeout, False
    while True:
        try:
            check(cfg, env)
            return
        except NotMountedError as e:
            if clock() >= end:
                raise
            if not said:
                log.warning("waiting up to %.0f s for the mount, then failing: %s",
                            timeout, e)
                said = True
        sleep(WAIT_INTERVAL_S)
