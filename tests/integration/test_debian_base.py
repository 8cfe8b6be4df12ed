"""hack/debian-base.sh on the base `make images` built: the weekly check against Debian.

Not a cluster test: it needs root (chroot), the Debian mirror and the root filesystem
tar hack/images.sh left in the cache, which the integration run builds first. The tar is
checked as its next ISO week would check it, in a cache of the test's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("NIGHTSHIFT_CACHE", Path.home() / ".cache" / "nightshift"))
SUITES = ("bookworm main", "bookworm-updates main", "bookworm-security main")

DRIVER = r"""
set -euo pipefail
CACHE=$1 SUITE=bookworm MIRROR=${NIGHTSHIFT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
step() { printf '==> %s\n' "$*"; }
die() { echo "die: $*" >&2; exit 1; }
. "$2/hack/debian-base.sh"
trap debian_remove_rootfs EXIT
make_fs() { die "make called, though a tar was there"; }
finish_fs() { touch "$1/etc/nightshift-finished"; }
debian_base t r1 make_fs finish_fs
echo "TAR=$DEBIAN_BASE_TAR ID=$DEBIAN_BASE_ID"
"""


def _base_tar() -> Path:
    if os.geteuid() != 0:
        pytest.skip("the Debian base check needs root (chroot, mount)")
    tars = sorted((CACHE / "images").glob("rootfs-bookworm-r*-*.tar"),
                  key=lambda p: p.stat().st_mtime)
    if not tars:
        pytest.skip(f"no base root filesystem in {CACHE / 'images'}: run `make images` "
                    "(the integration run does, when the cluster has its real node)")
    return tars[-1]


def _run(cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", DRIVER, "driver", str(cache), str(REPO)],
                          check=False, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def _member(tar: Path, name: str) -> str | None:
    with tarfile.open(tar) as t:
        try:
            f = t.extractfile(name)
        except KeyError:
            return None
        return f.read().decode() if f else None


def test_base_has_security_updates_and_is_named_by_its_packages() -> None:
    base = _base_tar()
    sources = _member(base, "./etc/apt/sources.list") or ""
    for suite in SUITES:
        assert re.search(rf"^deb \S+ {suite}$", sources, re.M), (base, sources)
    # finish_rootfs ran after the upgrade (Python's upgrade would put the guard back).
    assert not any(_member(base, f"./usr/lib/python3.{m}/EXTERNALLY-MANAGED")
                   for m in range(9, 14)), base


def test_weekly_check_keeps_an_unchanged_base_and_survives_a_mirror_down(
        tmp_path: Path) -> None:
    base = _base_tar()
    content = base.stem.rsplit("-", 1)[1]
    images = tmp_path / "images"
    images.mkdir()
    mine = images / f"t-r1-{content}.tar"
    try:
        os.link(base, mine)
    except OSError:
        shutil.copy(base, mine)

    # The security mirror down: the tar as it was, a warning, and no week marked checked.
    down = _run(tmp_path, NIGHTSHIFT_DEBIAN_SECURITY_MIRROR="http://127.0.0.1:9/debian-security")
    assert down.returncode == 0, down.stderr
    assert f"TAR={mine} ID=r1-{content}" in down.stdout, down.stdout
    assert "the Debian mirror did not answer" in down.stderr, down.stderr
    assert not list(images.glob("t-r1.checked-*")), list(images.iterdir())

    up = _run(tmp_path)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "this week's check of" in up.stdout, up.stdout
    stamp = list(images.glob("t-r1.checked-*"))
    assert len(stamp) == 1, list(images.iterdir())
    now = stamp[0].read_text().strip()
    if "no package changed" in up.stdout:
        # The name is what is in it: unpacked and listed again, the same name.
        assert now == content
        assert f"TAR={mine} ID=r1-{content}" in up.stdout
    else:
        # Debian published an update since the base was built: a new name, the recipe
        # finished again, the old tar gone.
        assert "packages updated" in up.stdout, up.stdout
        new = images / f"t-r1-{now}.tar"
        assert now != content and new.is_file() and not mine.exists()
        assert _member(new, "./etc/nightshift-finished") is not None

    # Checked this week: the next run reads the stamp and unpacks nothing.
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "this week's check" not in again.stdout and f"ID=r1-{now}" in again.stdout, again.stdout
