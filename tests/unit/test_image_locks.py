"""The operator and runner images install their Python dependencies from locks
(images/*/requirements.txt, written by hack/lock-images.sh): every requirement pinned
exactly with sha256 hashes, the locks cover what the images need, the Dockerfiles use
them with --require-hashes, and the build context admits them. Freshness is not checked
here (that needs the index): re-run hack/lock-images.sh after changing the inputs."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "operator/pyproject.toml").read_text())
BUILD_REQUIRES = list(PYPROJECT["build-system"]["requires"])
# image -> (its lock, its Dockerfile, what the lock must cover)
IMAGES = {
    "operator": ("images/operator/requirements.txt", "Dockerfile",
                 list(PYPROJECT["project"]["dependencies"]) + BUILD_REQUIRES),
    "runner": ("images/runner/requirements.txt", "images/runner/Dockerfile",
               [line.split("#")[0].strip()
                for line in (ROOT / "images/runner/requirements.in").read_text().splitlines()
                if line.split("#")[0].strip()] + BUILD_REQUIRES),
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s=]+)$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def logical_lines(text: str) -> list[str]:
    """pip's view of a requirements file: comments dropped, continuations joined."""
    out: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append(buf.strip())
        buf = ""
    assert not buf.strip(), "the file ends in a line continuation"
    return out


def parse_lock(text: str) -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, hashes); fails on anything but `name==version --hash...`."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    for line in logical_lines(text):
        req, *opts = line.split()
        m = PIN.match(req)
        assert m, f"{req!r} is not pinned as name==version"
        assert opts, f"{req} has no --hash"
        bad = [o for o in opts if not HASH.match(o)]
        assert not bad, f"{req}: only --hash=sha256:<64 hex> options are allowed, got {bad}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{name} is pinned twice"
        pins[name] = (Version(m.group(2)), opts)
    return pins


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_every_locked_requirement_is_pinned_with_hashes(image: str) -> None:
    pins = parse_lock((ROOT / IMAGES[image][0]).read_text())
    assert len(pins) >= len(IMAGES[image][2])
    for name, (version, hashes) in pins.items():
        assert hashes and len(set(hashes)) == len(hashes), f"{name}=={version}: {hashes}"


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_lock_covers_what_the_image_needs(image: str) -> None:
    lock, _, needs = IMAGES[image]
    pins = parse_lock((ROOT / lock).read_text())
    for text in needs:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{lock} lacks {text}: run hack/lock-images.sh {image}"
        assert req.specifier.contains(pins[name][0], prereleases=True), (
            f"{lock} pins {name}=={pins[name][0]}, outside {text}: "
            f"run hack/lock-images.sh {image}")


def test_operator_lock_covers_pyproject_runtime_deps_by_name() -> None:
    """The same check from pyproject.toml's side, so a new runtime dependency without a
    re-lock fails here with its own name."""
    pins = parse_lock((ROOT / IMAGES["operator"][0]).read_text())
    missing = [d for d in PYPROJECT["project"]["dependencies"]
               if canonicalize_name(Requirement(d).name) not in pins]
    assert missing == []


def pip_installs(dockerfile: str) -> list[list[str]]:
    """The argv of every `pip install` in the Dockerfile's RUN lines."""
    text = re.sub(r"\\\n", " ", (ROOT / dockerfile).read_text())
    out = []
    for line in text.splitlines():
        if not line.startswith("RUN "):
            continue
        for cmd in re.split(r"&&|;", line[4:]):
            argv = shlex.split(cmd)
            if argv[:2] == ["pip", "install"]:
                out.append(argv[2:])
    return out


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_dockerfile_installs_only_from_the_lock(image: str) -> None:
    lock, dockerfile, _ = IMAGES[image]
    text = (ROOT / dockerfile).read_text()
    assert re.search(rf"^COPY {re.escape(lock)} (\S+)$", text, re.M), \
        f"{dockerfile} does not COPY {lock}"
    installs = pip_installs(dockerfile)
    locked = [a for a in installs if "--require-hashes" in a]
    assert len(locked) == 1 and "--only-binary=:all:" in locked[0] and "-r" in locked[0]
    # Anything else is the local package itself: no index, no isolated build fetching
    # setuptools unpinned.
    for argv in installs:
        if argv is not locked[0]:
            assert "--no-deps" in argv and "--no-build-isolation" in argv, argv
            assert all(a.startswith(("-", "/src/")) for a in argv), argv


def test_build_context_admits_every_copied_path() -> None:
    """.dockerignore is an allow-list: each COPY source must be re-included."""
    allowed = [line[1:].strip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    dockerfiles = ["Dockerfile", *(str(p.relative_to(ROOT))
                                   for p in sorted(ROOT.glob("images/*/Dockerfile")))]
    copied = []
    for df in dockerfiles:
        for m in re.finditer(r"^COPY (\S+) \S+$", (ROOT / df).read_text(), re.M):
            copied.append(m.group(1).strip("/"))
    assert {IMAGES[i][0] for i in IMAGES} <= set(copied)
    for src in copied:
        assert any(src == a or src.startswith(a + "/") for a in allowed), \
            f"{src} is COPYed but .dockerignore does not admit it"
