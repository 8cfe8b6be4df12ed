"""A mounted storage whose input path goes through a symlink inside the prefix (a
'latest' link to a run's folder, allowed by check_item_paths): DirStore.ls names keys
under the prefix as given, so the manifest is found and the names are whole. Before,
they were under the link's target: the prefix read as raw data, names cut short."""
from pathlib import Path

from nightshift.aws.s3store import S3Store
from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths
from nightshift.runner.stagein import stage_in
from nightshift.runner.store import DirStore
from tests.unit.runner_s3 import write
from tests.unit.test_containment import make_world, runner_cfg

ITEM = Item("n1", 0, 0)


def test_input_through_a_symlink_reads_the_manifest(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    st: dict[str, S3Store | DirStore] = {"data": DirStore("data", world / "pvc")}
    up = runner_cfg(world, [], [{"storage": "data", "path": "run-7/out/{item}/"}])
    p = Paths(tmp_path / "up")
    c = Committer(up, p, ITEM, 1, st)
    c.prepare()
    write(p.outputs, "cat.txt", b"catalog")
    assert c.commit_success().ok
    write(world / "pvc/proj/run-7/out/n1", "junk-from-lost-attempt.txt", b"junk")
    (world / "pvc/proj/latest").symlink_to("run-7")
    down = runner_cfg(world, [{"storage": "data", "path": "latest/out/{item}/"}], [])
    paths = Paths(tmp_path / "down")
    stage_in(down, paths, ITEM, st)
    got = sorted(x.relative_to(paths.inputs).as_posix()
                 for x in paths.inputs.rglob("*") if x.is_file())
    assert got == ["_SUCCESS", "cat.txt"]
