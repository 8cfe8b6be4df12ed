"""On a mounted storage, a name an attempt interleaved as a file and the step then made a
folder (or the other way round) commits: what the step removed goes before the uploads."""
from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.aws.s3store import S3Store
from nightshift.runner.commit import Committer
from nightshift.runner.config import Item, Paths
from nightshift.runner.store import DirStore
from tests.unit.runner_s3 import write
from tests.unit.test_containment import make_world, runner_cfg

N1 = Item("n1", 0, 0)


@pytest.mark.parametrize(("first", "then"), [("plots", "plots/a.png"),
                                             ("plots/a.png", "plots")])
def test_interleaved_name_that_changes_shape_within_an_attempt_commits(
        tmp_path: Path, first: str, then: str) -> None:
    world = make_world(tmp_path)
    cfg = runner_cfg(world, [], [{"storage": "data", "path": "out/{item}/",
                                  "mode": "interleave"}])
    st: dict[str, S3Store | DirStore] = {"data": DirStore("data", world / "pvc")}
    errors: list[str] = []
    for n in (1, 2, 3):  # every retry runs the same steps
        p = Paths(tmp_path / f"a{n}")
        c = Committer(cfg, p, N1, n, st)
        c.prepare()
        write(p.outputs, first, b"draft", settled=True)
        c.interleave(set())
        c.interleave(set())  # uploaded while the step runs
        # the step then replaces it (a draft file by a folder of results, or back)
        f = p.outputs / first
        f.unlink()
        if f.parent != p.outputs:
            f.parent.rmdir()
        write(p.outputs, then, b"final")
        try:
            assert c.commit_success().ok
            break
        except Exception as e:  # safe(): exit 75, retried
            errors.append(f"attempt {n}: {type(e).__name__}: {e}")
    assert not errors, "\n".join(errors)
