"""On a mounted storage, a commit uploads before it deletes the withdrawn manifest's keys:
when the last commit wrote a file where this one writes a folder (or the reverse), every
attempt fails the same way (exit 75) and the item can never commit again."""
from pathlib import Path

from nightshift.aws.s3store import S3Store
from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths
from nightshift.runner.store import DirStore
from tests.unit.runner_s3 import write
from tests.unit.test_containment import make_world, runner_cfg

ITEM = Item("n1", 0, 0)


def test_file_then_folder_of_one_name_commits(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [], [{"storage": "data", "path": "out/{item}/"}])
    st: dict[str, S3Store | DirStore] = {"data": DirStore("data", world / "pvc")}
    p1 = Paths(tmp_path / "a1")
    c1 = Committer(cfg, p1, ITEM, 1, st)
    c1.prepare()
    write(p1.outputs, "plots", b"one plot")
    assert c1.commit_success().ok
    # the item runs again (a rerun, or a retry after the pod was lost after its commit)
    # and the step now writes plots/ as a folder
    errors = []
    for attempt in (2, 3, 4):
        p = Paths(tmp_path / f"a{attempt}")
        c = Committer(cfg, p, ITEM, attempt, st)
        c.prepare()
        write(p.outputs, "plots/a.png", b"png")
        try:
            res = c.commit_success()
            assert res.ok
            break
        except Exception as e:  # the sidecar's safe(): exit 75, retried
            errors.append(f"attempt {attempt}: {type(e).__name__}: {e}")
    assert not errors, "\n".join(errors)
    assert (world / "pvc/proj/out/n1/plots/a.png").read_bytes() == b"png"


def test_folder_then_file_of_one_name_commits(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [], [{"storage": "data", "path": "out/{item}/"}])
    st: dict[str, S3Store | DirStore] = {"data": DirStore("data", world / "pvc")}
    p1 = Paths(tmp_path / "a1")
    c1 = Committer(cfg, p1, ITEM, 1, st)
    c1.prepare()
    write(p1.outputs, "plots/a.png", b"png")
    assert c1.commit_success().ok
    p2 = Paths(tmp_path / "a2")
    c2 = Committer(cfg, p2, ITEM, 2, st)
    c2.prepare()
    write(p2.outputs, "plots", b"one plot")
    assert c2.commit_success().ok
