"""The bed's KWOK catalog holds only Linux entries, so Karpenter's nodes are not drifted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightshift_localcluster.kwokcatalog import linux_only, write_linux_catalog
from nightshift_localcluster.paths import Layout


def _entry(name: str, os_name: str, arch: str = "x86_64") -> dict[str, object]:
    return {"name": name, "operatingSystems": [os_name], "architecture": arch,
            "offerings": [], "resources": {"cpu": "2", "memory": "4Gi"}}


def test_windows_and_i386_entries_are_dropped_and_order_kept() -> None:
    entries = [_entry("c6i.large", "windows"), _entry("c6i.large", "linux"),
               _entry("t2.micro", "linux", "i386"), _entry("t2.micro", "linux"),
               _entry("m6i.large", "windows"), _entry("m6i.large", "linux")]
    assert [(e["name"], e["operatingSystems"], e["architecture"])
            for e in linux_only(entries)] == [
        ("c6i.large", ["linux"], "x86_64"), ("t2.micro", ["linux"], "x86_64"),
        ("m6i.large", ["linux"], "x86_64")]


def test_write_refuses_a_file_with_no_linux_entry(tmp_path: Path) -> None:
    src = tmp_path / "src.json"
    src.write_text(json.dumps([_entry("c6i.large", "windows")]))
    with pytest.raises(ValueError, match="no instance type offers Linux"):
        write_linux_catalog(src, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_the_pinned_example_has_windows_first_and_the_copy_does_not(tmp_path: Path) -> None:
    """The upstream quirk this works around, and the fix, on the real file."""
    src = Layout.discover().kwok_example_catalog
    if not src.exists():
        pytest.skip(f"{src} missing: the karpenter module is not in the Go module cache "
                    "(make upstream fetches it)")
    example = json.loads(src.read_text())
    first: dict[str, list[str]] = {}
    for e in example:
        first.setdefault(e["name"], e["operatingSystems"])
    assert any("linux" not in oses for oses in first.values())
    out = tmp_path / "linux.json"
    write_linux_catalog(src, out)
    copied = json.loads(out.read_text())
    assert all(e["operatingSystems"] == ["linux"] and e["architecture"] != "i386"
               for e in copied)
    # One entry per type, so the provider's first match by name is the one scheduled.
    assert sorted(e["name"] for e in copied) == sorted(first)
