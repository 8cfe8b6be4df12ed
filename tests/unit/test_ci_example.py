"""examples/ci: the collaboration workflow is well-formed (it cannot run here: it needs
GitHub's runners), points at files Nightshift has and values its chart takes, and
simulate.py keeps a run's shape while making it tiny and valid."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from nightshift.cli import plugin, validate
from nightshift.cli.main import main
from tests.clusterutil import ROOT

CI = ROOT / "examples" / "ci"
WORKFLOW = CI / "nightshift.yml"


def workflow() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def simulate_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_simulate", CI / "simulate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def scripts() -> str:
    return "\n".join(s.get("run", "") for job in workflow()["jobs"].values()
                     for s in job["steps"])


def test_workflow_structure() -> None:
    wf = workflow()
    # YAML 1.1 reads the key `on` as true; GitHub reads it as "on".
    triggers = wf["on"] if "on" in wf else wf[True]
    assert set(triggers) == {"pull_request", "push"}
    assert set(wf["jobs"]) == {"validate", "simulate"}
    assert wf["jobs"]["simulate"]["needs"] == "validate"
    for name, job in wf["jobs"].items():
        assert job["runs-on"] == "ubuntu-latest", name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), (name, step)
            if "uses" in step:
                assert re.fullmatch(r"[\w-]+/[\w-]+@v\d+", step["uses"]), step["uses"]
    for var in ("NIGHTSHIFT_REPOSITORY", "NIGHTSHIFT_REF", "MANIFESTS", "PROVIDER",
                "KIND_NODE_IMAGE"):
        assert var in wf["env"], var


def test_workflow_uses_files_nightshift_has() -> None:
    text = WORKFLOW.read_text()
    paths = set(re.findall(r"\.nightshift/([\w./-]+)", text)) - {""}
    assert {"charts/nightshift", "images/runner/Dockerfile", "examples/ci/simulate.py"} <= paths
    for p in paths:
        assert (ROOT / p.rstrip("/")).exists(), p
    assert "./.nightshift/operator[validate]" in text
    assert "validate" in (ROOT / "operator" / "pyproject.toml").read_text()


def test_workflow_sets_only_values_the_chart_has() -> None:
    values = yaml.safe_load((ROOT / "charts" / "nightshift" / "values.yaml").read_text())
    sets = re.findall(r"--set ([\w.]+)=", scripts())
    assert sets
    for key in sets:
        node = values
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, key
            node = node[part]


# Shell words of the workflow's command lines, replaced by what they stand for.
SUBSTITUTE = {'"$PROVIDER"': "aws", '"${old[@]}"': "", "$MANIFESTS": "manifests/",
              '"${run#*/}"': "some-run"}


def cli_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="nightshift")
    sub = ap.add_subparsers(dest="cmd", required=True)
    plugin.add_commands(sub)
    validate.add_command(sub)
    return ap


def test_workflow_commands_parse() -> None:
    """Every `nightshift ...` and `kubectl nightshift ...` line of the workflow is
    accepted by the CLI's own argument parser."""
    lines = [ln.split("||")[0] for ln in scripts().splitlines()
             if re.search(r"(^|\s)nightshift (validate|watch|status)", ln)]
    assert len(lines) == 4, lines
    for line in lines:
        command = line
        for shell, value in SUBSTITUTE.items():
            command = command.replace(shell, value)
        words = shlex.split(command)
        words = words[words.index("nightshift") + 1:]
        assert not any("$" in w for w in words), words
        cli_parser().parse_args(words)  # exits 2 on anything the CLI does not take


def test_example_manifests_validate_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--provider", "aws", str(CI / "manifests")]) == 0
    assert "3 Nightshift objects checked, 0 problems" in capsys.readouterr().err


def test_simulation_keeps_the_shape_and_is_tiny(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    sim = simulate_module()
    out = tmp_path / "sim.yaml"
    assert sim.main([str(CI / "manifests"), "-o", str(out), "--items", "3"]) == 0
    runs = list(yaml.safe_load_all(out.read_text()))
    originals = {r["metadata"]["name"]: r for r in sim.pipelineruns([str(CI / "manifests")])}
    assert sorted(r["metadata"]["name"] for r in runs) == sorted(originals)
    for run in runs:
        spec, original = run["spec"], originals[run["metadata"]["name"]]["spec"]
        assert not {"storage", "archive", "virtualCluster"} & set(spec)
        assert [s["name"] for s in spec["stages"]] == [s["name"] for s in original["stages"]]
        for st, orig in zip(spec["stages"], original["stages"], strict=True):
            assert st.get("dependsOn") == orig.get("dependsOn")
            assert st["image"] == "busybox:1.36" and "pool" not in st
            assert not {"inputs", "outputs"} & set(st)
            assert ("forEach" in st) == ("forEach" in orig)
            if "forEach" in st:
                (kind, source), = st["forEach"].items()
                if kind == "range":
                    r = source
                    assert (r["to"] - r["from"]) // r.get("step", 1) + 1 <= 3
                else:
                    assert len(source) <= 3
    # fromS3 became a range of the same size bound.
    chiles = next(r for r in runs if r["metadata"]["name"] == "chiles-2024")
    assert chiles["spec"]["stages"][0]["forEach"] == {
        "range": {"from": 0, "to": 2, "format": "sim-{:03d}"}}
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0
