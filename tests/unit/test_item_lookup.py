"""run.sh (in the user's container) and the runner (in its own) find the same item."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nightshift.pipelinerun import items as render_items
from nightshift.runner.config import Paths, resolve_item

RUN = render_items.RunRef(name="r", namespace="ns", uid="u")


def _materialize(tmp: Path, configmaps: list[dict]) -> Path:  # type: ignore[type-arg]
    """What the projected items volume looks like inside a pod."""
    d = tmp / "items"
    d.mkdir(exist_ok=True)
    for cm in configmaps:
        for key, value in cm["data"].items():
            (d / key).write_text(value)
    return d


def _run_sh(folder: Path, ci: int) -> tuple[str, str]:
    out = subprocess.run(
        ["/bin/sh", str(folder / "run.sh"), "step", "--", "/bin/sh", "-c",
         'printf "%s|%s" "$NIGHTSHIFT_ITEM_INDEX" "$NIGHTSHIFT_ITEM"'],
        env={"JOB_COMPLETION_INDEX": str(ci), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True)
    idx, item = out.stdout.split("|", 1)
    return idx, item


def _runner(folder: Path, ci: int) -> tuple[str, str]:
    item = resolve_item(Paths(root=folder.parent),
                        {"JOB_COMPLETION_INDEX": str(ci),
                         "NIGHTSHIFT_ITEMS_FILE": str(folder / "items")})
    return str(item.index), item.value


@pytest.mark.parametrize("chunk_bytes", [render_items.CHUNK_BYTES, 64])
def test_first_attempt_agrees(tmp_path: Path, chunk_bytes: int,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    real_chunk = render_items.chunk
    monkeypatch.setattr(render_items, "chunk", lambda lines: real_chunk(lines, chunk_bytes))
    values = [f"night {i:04d} {{x}} $HOME" for i in range(40)]
    cms = render_items.items_configmaps(RUN, "s", values)
    if chunk_bytes == 64:
        assert len(cms) > 3, "the small budget should split the list into chunks"
    folder = _materialize(tmp_path, cms)
    for ci in (0, 1, 7, 20, 39):
        assert _run_sh(folder, ci) == (str(ci), values[ci])
        assert _runner(folder, ci) == (str(ci), values[ci])


def test_rerun_maps_to_original_indexes(tmp_path: Path) -> None:
    values = [f"item-{i}" for i in range(30)]
    failed = [3, 17, 29]
    folder = _materialize(tmp_path, render_items.items_configmaps(RUN, "s", values)
                          + render_items.indexes_configmaps(RUN, "s", 1, failed))
    for ci, orig in enumerate(failed):
        assert _run_sh(folder, ci) == (str(orig), values[orig])
        assert _runner(folder, ci) == (str(orig), values[orig])
