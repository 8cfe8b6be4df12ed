"""A mounted-storage input whose path names a directory without its trailing / fails
stage-in (exit 66), saying to add the /; one file still stages as itself.

Found by an audit: the directory's files were staged flattened to their base names, so
two files of one name in different subfolders landed on one path and one was lost (the
record still counting both).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.config import Item, Paths, RunnerConfig
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import DirStore


def volume(tmp_path: Path, path: str, optional: bool = False) -> RunnerConfig:
    vol = tmp_path / "pvc"
    for sub, body in (("a", b"from a"), ("b", b"from b")):
        (vol / "proj" / "raw" / "n1" / sub).mkdir(parents=True, exist_ok=True)
        (vol / "proj" / "raw" / "n1" / sub / "x.fits").write_bytes(body)
    return RunnerConfig.loads(json.dumps({
        "version": 1, "run": "r", "namespace": "ns", "stage": "s",
        "storages": {"data": {"kind": "dir", "path": str(vol), "prefix": "proj/"}},
        "inputs": [{"storage": "data", "path": path, "optional": optional}],
        "outputs": []}))


@pytest.mark.parametrize("optional", [False, True])
def test_a_directory_without_its_slash_fails_saying_to_add_it(tmp_path: Path,
                                                              optional: bool) -> None:
    cfg = volume(tmp_path, "raw/{item}", optional)
    paths = Paths(tmp_path / "pod")
    with pytest.raises(FileNotFoundError) as err:
        stage_in(cfg, paths, Item("n1", 0, 0), {"data": DirStore("data", tmp_path / "pvc")})
    assert str(err.value) == (
        f"inputs[0].path 'raw/{{item}}' names a directory in storage 'data' "
        f"({tmp_path}/pvc/proj/raw/n1), not a file: add a trailing / to stage the files "
        "under it")
    assert not any(p.is_file() for p in paths.inputs.rglob("*"))


def test_with_its_slash_or_as_one_file_it_stages(tmp_path: Path) -> None:
    store: dict[str, S3Store | DirStore] = {"data": DirStore("data", tmp_path / "pvc")}
    cfg = volume(tmp_path, "raw/{item}/")
    paths = Paths(tmp_path / "dir")
    assert stage_in(cfg, paths, Item("n1", 0, 0), store).files == 2
    assert (paths.inputs / "a" / "x.fits").read_bytes() == b"from a"
    one = Paths(tmp_path / "one")
    cfg = volume(tmp_path, "raw/{item}/b/x.fits")
    assert stage_in(cfg, one, Item("n1", 0, 0), store).files == 1
    assert (one.inputs / "x.fits").read_bytes() == b"from b"
