"""The Gluster client's mount script (sharedstorage/gluster.py CLIENT_SH), run in a real
dash with `mount`, `getent` and `sleep` faked on PATH: a volume that never mounts ends
the client after CLIENT_MOUNT_TRIES tries with glusterfs' own error as its last lines
(the kubelet's CrashLoopBackOff, which the storage's status quotes); one that mounts
late is mounted without exiting."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nightshift.api import podstate
from nightshift.sharedstorage import gluster

DASH = shutil.which("dash")
pytestmark = pytest.mark.skipif(DASH is None, reason="dash is not installed")

E_LINE = ("[2026-11-29 17:01:02.123456 +0000] E [glusterfsd-mgmt.c:2339:mgmt_getspec_cbk] "
          "0-mgmt: failed to fetch volume file (key:/broadband)")


def fake_bin(tmp: Path, mount_fails: int) -> Path:
    """`mount` fails its first `mount_fails` calls (writing glusterfs' error to the
    log-file it is given, as the real client does), then succeeds."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    scripts = {
        "getent": 'echo "10.0.0.${#2} STREAM $2"',
        "sleep": "exit 0",
        "umount": "exit 0",
        "mount": f"""n=$(cat {tmp}/calls 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {tmp}/calls
log=${{4#log-file=}}
echo "$5" > {tmp}/source
if [ "$n" -le {mount_fails} ]; then echo '{E_LINE}' >> "$log"; echo "Mount failed." >&2; exit 1; fi
exit 0""",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def client(tmp: Path, mount_fails: int, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    script = gluster.CLIENT_SH.format(mount=tmp / "mnt", servers="svc.ns pod-0.svc.ns",
                                      volume="broadband", log=tmp / "client.log",
                                      tries=gluster.CLIENT_MOUNT_TRIES,
                                      message=tmp / "termination-log")
    (tmp / "mnt").mkdir()
    # Mounted: the script's liveness loop runs until it is stopped; stop it at once.
    script = script.replace("while :; do", "exit 0\nwhile :; do", 1)
    env = {**os.environ, "PATH": f"{fake_bin(tmp, mount_fails)}:{os.environ['PATH']}"}
    assert DASH is not None
    return subprocess.run([DASH, "-c", script], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_a_volume_that_never_mounts_ends_the_client_with_its_reason(tmp_path: Path) -> None:
    got = client(tmp_path, mount_fails=1000)
    assert got.returncode == 1, got
    assert (tmp_path / "calls").read_text().strip() == str(gluster.CLIENT_MOUNT_TRIES)
    # The servers by address, failing over in order (mount.glusterfs drops long names).
    assert (tmp_path / "source").read_text().strip() == "10.0.0.6,10.0.0.12:/broadband"
    # glusterfs' reason said while it retried, then, undated, in the client's last
    # line, which is also its termination message: what the kubelet keeps, and the
    # storage's status quotes (podstate.crash_looping).
    assert E_LINE in got.stdout
    message = (tmp_path / "termination-log").read_text()
    assert got.stdout.splitlines()[-1] == message.strip() == (
        "volume broadband failed to mount from servers 10.0.0.6,10.0.0.12 after "
        f"{gluster.CLIENT_MOUNT_TRIES} tries: E [glusterfsd-mgmt.c:2339:mgmt_getspec_cbk] "
        "0-mgmt: failed to fetch volume file (key:/broadband)")
    assert podstate.last_words(message) == message.strip()


def test_a_volume_that_mounts_late_is_mounted_without_exiting(tmp_path: Path) -> None:
    got = client(tmp_path, mount_fails=gluster.CLIENT_MOUNT_TRIES - 1)
    assert got.returncode == 0, got
    assert got.stdout.splitlines()[-1] == f"mounted broadband at {tmp_path / 'mnt'}"
    assert E_LINE in got.stdout  # said while it retried
