"""On a mounted storage, a name the last commit wrote as a file and this one writes as a
folder (or the reverse) commits: the withdrawn keys go before the uploads, and the
folders they leave empty with them. Before, every attempt failed the same way (exit 75)
and the item could never commit again."""
from pathlib import Path

from tests.unit.test_runner_withdrawn_consumers import attempt, dir_world


def test_file_then_folder_of_one_name_commits(tmp_path: Path) -> None:
    world, cfg, st = dir_world(tmp_path)
    assert attempt(cfg, st, tmp_path, 1, "plots", b"one plot").commit_success().ok
    # the item runs again (a rerun, or a retry after the pod was lost after its commit)
    # and the step now writes plots/ as a folder
    errors = []
    for n in (2, 3, 4):
        try:
            res = attempt(cfg, st, tmp_path, n, "plots/a.png", b"png").commit_success()
            assert res.ok
            break
        except Exception as e:  # the sidecar's safe(): exit 75, retried
            errors.append(f"attempt {n}: {type(e).__name__}: {e}")
    assert not errors, "\n".join(errors)
    assert (world / "pvc/proj/out/n1/plots/a.png").read_bytes() == b"png"


def test_folder_then_file_of_one_name_commits(tmp_path: Path) -> None:
    _, cfg, st = dir_world(tmp_path)
    assert attempt(cfg, st, tmp_path, 1, "plots/a.png", b"png").commit_success().ok
    assert attempt(cfg, st, tmp_path, 2, "plots", b"one plot").commit_success().ok
