"""The Gluster client's mount script and readiness probe (sharedstorage/gluster.py
CLIENT_SH, PROBE_SH), run in a real dash with `mount`, `getent` and `sleep` faked on
PATH: while a mount fails, the client keeps trying and leaves one undated line saying
why, which the probe prints (the kubelet's Unhealthy event, which the storage's status
quotes: observe.not_mounted); once mounted, the line is gone."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nightshift.sharedstorage import gluster

DASH = shutil.which("dash")
pytestmark = pytest.mark.skipif(DASH is None, reason="dash is not installed")

E_LINE = ("[2026-11-29 17:01:02.123456 +0000] E [glusterfsd-mgmt.c:2339:mgmt_getspec_cbk] "
          "0-mgmt: failed to fetch volume file (key:/broadband)")
WHY = "volume broadband does not mount: failed to fetch volume file (key:/broadband)"


def fake_bin(tmp: Path, mount_fails: int, e_line: str = E_LINE) -> Path:
    """`mount` fails its first `mount_fails` calls (writing glusterfs' error to the
    log-file it is given, as the real client does), then succeeds; each call records
    the line the client left after the call before it."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    scripts = {
        "getent": 'echo "10.0.0.${#2} STREAM $2"',
        "sleep": "exit 0",
        "umount": "exit 0",
        "mount": f"""n=$(cat {tmp}/calls 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {tmp}/calls
cat {tmp}/why >> {tmp}/seen 2>/dev/null
log=${{4#log-file=}}
echo "$5" > {tmp}/source
if [ "$n" -le {mount_fails} ]; then echo '{e_line}' >> "$log"; echo "Mount failed." >&2; exit 1; fi
exit 0""",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def run(script: str, tmp: Path, mount_fails: int = 0,
        e_line: str = E_LINE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{fake_bin(tmp, mount_fails, e_line)}:{os.environ['PATH']}"}
    assert DASH is not None
    return subprocess.run([DASH, "-c", script], env=env, capture_output=True, text=True,
                          timeout=30, check=False)


def test_a_client_keeps_trying_and_says_why_until_it_mounts(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    script = gluster.CLIENT_SH.format(mount=tmp_path / "mnt", servers="svc.ns pod-0.svc.ns",
                                      volume="broadband", log=tmp_path / "client.log",
                                      why_file=tmp_path / "why")
    # Mounted, the script's liveness loop runs until it is stopped: stop it at once.
    got = run(script.replace("while :; do", "exit 0\nwhile :; do", 1), tmp_path,
              mount_fails=30)
    assert got.returncode == 0, got
    assert (tmp_path / "calls").read_text().strip() == "31"  # no limit: it tries on
    # The servers by address, failing over in order (mount.glusterfs drops long names).
    assert (tmp_path / "source").read_text().strip() == "10.0.0.6,10.0.0.12:/broadband"
    # After each failure one line, the same each time (undated: the kubelet folds the
    # probe's repeated output into one event, and the status is not rewritten).
    assert (tmp_path / "seen").read_text().splitlines() == [WHY] * 30
    assert got.stdout.splitlines()[-1] == f"mounted broadband at {tmp_path / 'mnt'}"
    assert E_LINE in got.stdout  # glusterfs' own words in the pod's log too
    assert not (tmp_path / "why").exists()  # mounted: nothing to say


def client(tmp: Path) -> str:
    (tmp / "mnt").mkdir()
    return gluster.CLIENT_SH.format(
        mount=tmp / "mnt", servers="svc.ns pod-0.svc.ns", volume="broadband",
        log=tmp / "client.log", why_file=tmp / "why",
    ).replace("while :; do", "exit 0\nwhile :; do", 1)


STAMP = "[2026-11-29 17:08:54.976461 +0000] E "


@pytest.mark.parametrize(("e_line", "why"), [
    (STAMP + "[name.c:267:af_inet_client_get_remote_sockaddr] 0-glusterfs: DNS resolution "
     "failed on host broadband-gluster.physics.svc.cluster.local",
     "DNS resolution failed on host broadband-gluster.physics.svc.cluster.local"),
    (STAMP + "[MSGID: 101075] [common-utils.c:505:gf_resolve_ip6] 0-resolver: error in "
     "getaddrinfo [{family=2}, {ret=Name or service not known}]",
     "error in getaddrinfo [{family=2}, {ret=Name or service not known}]"),
    ("", "glusterfs logged no error (servers 10.0.0.6,10.0.0.12)"),
])
def test_the_line_is_glusterfs_error_without_its_place(tmp_path: Path, e_line: str,
                                                        why: str) -> None:
    got = run(client(tmp_path), tmp_path, mount_fails=2, e_line=e_line)
    assert got.returncode == 0, got
    assert (tmp_path / "seen").read_text().splitlines() == [
        f"volume broadband does not mount: {why}"] * 2


def test_the_probe_fails_printing_why_while_not_mounted(tmp_path: Path) -> None:
    probe = gluster.PROBE_SH.format(mount=tmp_path / "mnt", why_file=tmp_path / "why")
    assert DASH is not None
    (tmp_path / "why").write_text(WHY + "\n")
    got = subprocess.run([DASH, "-c", probe], capture_output=True, text=True, check=False)
    assert (got.returncode, got.stdout.strip()) == (1, WHY)
    # Before the first failure (or with the mount there and not answering) there is no
    # line: the probe fails all the same.
    (tmp_path / "why").unlink()
    got = subprocess.run([DASH, "-c", probe], capture_output=True, text=True, check=False)
    assert (got.returncode, got.stdout) == (1, "")
