"""The layer contracts (.importlinter, checked by `make lint`) cover every module, and a
deliberate violation breaks them."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clusterutil import ROOT

PACKAGE = ROOT / "operator" / "src" / "nightshift"
KINDS = ("pipelinerun", "virtualcluster", "sharedstorage")
# Modules of a kind's folder that do I/O, by role (same names in every kind).
IO_ROLES = {"reconcile", "handlers", "observe", "itemsource", "placement", "__init__"}
LINT = Path(sys.executable).parent / "lint-imports"


def contracts() -> configparser.ConfigParser:
    cp = configparser.ConfigParser()
    cp.read(ROOT / ".importlinter")
    return cp


def pure_modules() -> set[str]:
    return set(contracts()["importlinter:contract:pure"]["source_modules"].split())


@pytest.mark.parametrize("kind", KINDS)
def test_every_module_of_a_kind_is_pure_or_a_known_io_role(kind: str) -> None:
    folder = PACKAGE / kind
    if not folder.is_dir():
        pytest.skip(f"no {kind}/ folder yet")
    pure = pure_modules()
    unclassified = [p.stem for p in sorted(folder.glob("*.py"))
                    if p.stem not in IO_ROLES and f"nightshift.{kind}.{p.stem}" not in pure]
    assert not unclassified, (
        f"{kind}/ modules {unclassified} are in no layer contract: add them to the pure "
        "contract in .importlinter, or name them after an I/O role "
        f"({', '.join(sorted(IO_ROLES - {'__init__'}))})")


def test_pure_contract_names_only_modules_that_exist() -> None:
    for module in pure_modules():
        path = PACKAGE.parent / Path(*module.split("."))
        assert path.with_suffix(".py").exists() or path.is_dir(), module


@pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (make venv)")
@pytest.mark.parametrize(("module", "line"), [
    ("api/names.py", "# no violation: the copy itself keeps every contract"),
    ("pipelinerun/plan.py", "from nightshift import kube as _k  # deliberate violation"),
    ("virtualcluster/status.py", "import boto3 as _b  # deliberate violation"),
    ("pipelinerun/reconcile.py", "import kubernetes as _k  # deliberate violation"),
    ("runner/main.py", "import pydantic as _p  # deliberate violation"),
])
def test_a_deliberate_violation_breaks_the_contracts(tmp_path: Path, module: str,
                                                     line: str) -> None:
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "nightshift",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = src / "nightshift" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run([str(LINT), "--no-cache", "--no-logo"], cwd=tmp_path, env=env, check=False,
                        capture_output=True, text=True, timeout=120)
    if line.startswith("# no violation"):
        assert ok.returncode == 0, ok.stdout + ok.stderr
        return
    assert ok.returncode != 0, ok.stdout
    assert "BROKEN" in ok.stdout
