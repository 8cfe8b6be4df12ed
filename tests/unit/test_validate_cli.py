"""`nightshift validate`: every bad-input case refused with the API server's or the
operator's message, clean examples, the CLI's shape (prefixes, JSON, exit codes), and
the packaged CRDs and CEL stand-ins it relies on."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.admission import cel, k8scel
from nightshift.admission.crds import crd_texts
from nightshift.cli.main import main
from tests import bad_pipelineruns, bad_sharedstorages, bad_virtualclusters
from tests.clusterutil import ROOT
from tests.unit.vcfixtures import AWS_NODECLASS, CATALOG_ENTRIES

pytest.importorskip("celpy")

TABLES = {"pipelinerun": bad_pipelineruns, "virtualcluster": bad_virtualclusters,
          "sharedstorage": bad_sharedstorages}
CEL_CASES = [(t, c[0], c[1], c[3]) for t, m in TABLES.items() for c in m.BAD if c[2] == "cel"]
INVALID_CASES = [(t, c[0], c[1], c[3]) for t, m in TABLES.items() for c in m.BAD
                 if c[2] == "invalid"]
# What the operator would know of the cluster the SharedStorage table assumes (FACTS).
SS_FACTS = ["--storage-class", "gp2", "--storage-class", "gp3", "--default-storage-class",
            "gp2", *(a for c in bad_sharedstorages.FACTS.cluster_cidrs
                     for a in ("--cluster-cidr", c))]


def facts_vc() -> dict[str, Any]:
    """The VirtualCluster whose pools the SharedStorage cases name (valid itself)."""
    classes = {"workers": "compute", "imaging": "memory", "nfs": "general",
               "storage": "storage"}
    return {"apiVersion": "nightshift.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": bad_sharedstorages.VC, "namespace": "physics"},
            "spec": {"nodeClass": AWS_NODECLASS,
                     "pools": [{"name": p, "class": classes[p]}
                               for p in bad_sharedstorages.POOLS]}}


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[Any],
             *flags: str, name: str = "m.yaml") -> tuple[int, dict[str, Any]]:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    rc = main(["validate", "-o", "json", *flags, str(path)])
    return rc, json.loads(capsys.readouterr().out)


def findings(report: dict[str, Any], index: int, source: str) -> list[str]:
    obj = next(o for o in report["objects"] if o["doc"] == index)
    return [f["text"] for f in obj["findings"] if f["source"] == source]


@pytest.fixture
def catalog_file(tmp_path: Path) -> str:
    path = tmp_path / "instance_types.json"
    path.write_text(json.dumps(CATALOG_ENTRIES))
    return str(path)


# --- the bad-input tables ----------------------------------------------------------

@pytest.mark.parametrize(("table", "case", "manifest", "text"), CEL_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CEL_CASES])
def test_admission_cases_give_the_api_servers_messages(
        table: str, case: str, manifest: dict[str, Any], text: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The tables were recorded from a v1.34 API server; tests/unit/
    # test_validate_releases.py holds validate to later releases' wording.
    rc, report = validate(tmp_path, capsys, [manifest], "--kubernetes-version", "1.34")
    got = findings(report, 0, "admission")
    assert rc == 1
    assert sorted(got) == TABLES[table].API_SERVER_MESSAGES[case]
    assert any(text in m for m in got), got
    assert findings(report, 0, "operator") == []  # refused at admission: nothing past it


@pytest.mark.parametrize(("table", "case", "manifest", "text"), INVALID_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in INVALID_CASES])
def test_operator_cases_give_the_operators_messages(
        table: str, case: str, manifest: dict[str, Any], text: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], catalog_file: str) -> None:
    flags = ["--instance-catalog", catalog_file]
    docs = [manifest]
    if table == "sharedstorage":
        flags += SS_FACTS
        docs.append(facts_vc())
    rc, report = validate(tmp_path, capsys, docs, *flags)
    assert rc == 1
    assert findings(report, 0, "admission") == []  # the API server admits it
    got = findings(report, 0, "operator")
    assert any(text in m for m in got), got
    if table == "sharedstorage":
        assert report["objects"][1]["findings"] == []


def test_every_admission_case_has_its_recorded_message() -> None:
    for table, module in TABLES.items():
        cel_ids = {c[0] for c in module.BAD if c[2] == "cel"}
        assert set(module.API_SERVER_MESSAGES) == cel_ids, table


@pytest.mark.parametrize(("case", "base", "change", "text"), bad_pipelineruns.BAD_UPDATES,
                         ids=[c[0] for c in bad_pipelineruns.BAD_UPDATES])
def test_transition_rules_with_old(case: str, base: dict[str, Any], change: dict[str, Any],
                                   text: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(base))
    new = copy.deepcopy(base)
    new["spec"].update(change)
    rc, report = validate(tmp_path, capsys, [new], "--old", str(old),
                          "--kubernetes-version", "1.34")
    got = findings(report, 0, "admission")
    assert rc == 1
    assert got == bad_pipelineruns.API_SERVER_UPDATE_MESSAGES[case]
    assert text in got[0]


@pytest.mark.parametrize(("case", "base", "change"), bad_pipelineruns.GOOD_UPDATES,
                         ids=[c[0] for c in bad_pipelineruns.GOOD_UPDATES])
def test_mutable_fields_pass_with_old(case: str, base: dict[str, Any], change: dict[str, Any],
                                      tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(base))
    new = copy.deepcopy(base)
    new["spec"].update(change)
    rc, report = validate(tmp_path, capsys, [new], "--old", str(old))
    assert (rc, report["problems"]) == (0, 0)


# --- examples and good inputs --------------------------------------------------------

EXAMPLES = {"virtualcluster-eks.yaml": [], "virtualcluster-local.yaml": ["--provider", "kwok"]}


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_examples_validate_clean(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["validate", *EXAMPLES.get(name, []), str(ROOT / "examples" / name)])
    out = capsys.readouterr()
    assert rc == 0, out.out
    assert " 0 problems" in out.err


def test_ci_example_manifests_validate_clean(capsys: pytest.CaptureFixture[str]) -> None:
    folder = ROOT / "examples" / "ci" / "manifests"
    if not folder.is_dir():
        pytest.skip("no examples/ci/manifests")
    rc = main(["validate", "--provider", "kwok", str(folder)])
    out = capsys.readouterr()
    assert rc == 0, out.out
    assert re.search(r"^[1-9]\d* Nightshift objects? checked, 0 problems", out.err), out.err


@pytest.mark.parametrize("case", sorted(bad_sharedstorages.GOOD))
def test_good_sharedstorages_validate_clean(case: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    docs = [bad_sharedstorages.GOOD[case], facts_vc()]
    rc, report = validate(tmp_path, capsys, docs, *SS_FACTS)
    assert (rc, report["problems"]) == (0, 0), report


# --- the command's shape -------------------------------------------------------------

def test_multi_document_prefixes_and_exit_code(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    good = bad_pipelineruns.run(name="good")
    bad = bad_pipelineruns.run([bad_pipelineruns.stage("a"), bad_pipelineruns.stage("a")])
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump_all([good, other, bad]))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        f"{path}:2:PipelineRun/bad: spec.stages: Invalid value: stage names must be unique"]
    assert out.err.strip() == "2 Nightshift objects checked, 1 problem, 1 other objects skipped"
    path.write_text(yaml.safe_dump_all([good, other]))
    assert main(["validate", str(path)]) == 0


def test_unknown_fields_are_reported_and_the_rest_is_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = bad_pipelineruns.run([bad_pipelineruns.stage("Bad_Name", retry=3)], paralelism={})
    rc, report = validate(tmp_path, capsys, [m])
    assert rc == 1
    assert findings(report, 0, "admission") == [
        'unknown field "spec.paralelism"', 'unknown field "spec.stages[0].retry"',
        "spec.stages[0].name: Invalid value: \"Bad_Name\": spec.stages[0].name in body "
        "should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"]


def test_unreadable_yaml_and_unknown_version(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: PipelineRun\nspec: [unclosed\n")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({**bad_pipelineruns.run(), "apiVersion": "nightshift.io/v1"}))
    assert main(["validate", str(broken), str(wrong)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{broken}:0:?: cannot read: ")
    assert lines[1] == (f'{wrong}:0:PipelineRun/bad: no matches for kind "PipelineRun" in '
                        'version "nightshift.io/v1"; use apiVersion nightshift.io/v1alpha1')


def test_our_kinds_under_a_group_that_is_not_ours_are_refused_not_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = bad_pipelineruns.run()
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump_all([
        {**base, "apiVersion": "nightshift/v1alpha1"},
        {k: v for k, v in base.items() if k != "apiVersion"},
        # Tekton's PipelineRun is another group's kind of the same name: skipped.
        {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": {"name": "t"}}]))
    assert main(["validate", str(typo)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        f'{typo}:0:PipelineRun/bad: no matches for kind "PipelineRun" in version '
        '"nightshift/v1alpha1"; use apiVersion nightshift.io/v1alpha1',
        f"{typo}:1:PipelineRun/bad: apiVersion is missing; use apiVersion "
        "nightshift.io/v1alpha1"]
    assert "1 other objects skipped" in captured.err


def test_a_directory_with_no_manifests_is_a_finding(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["validate", str(tmp_path / "empty")]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path / 'empty'}:0:?: no .json, .yaml, .yml files in this directory"]


def test_facts_come_from_the_files_and_flags(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ss = bad_sharedstorages.good("nfs-dedicated")
    # Without a VirtualCluster or StorageClasses known, neither is checked (as the operator
    # does not claim what it did not look up)...
    rc, _ = validate(tmp_path, capsys, [ss])
    assert rc == 0
    # ...with them, both are.
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {
        "name": "gp2", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}}
    rc, report = validate(tmp_path, capsys, [ss, sc, {**facts_vc(), "metadata": {
        "name": "other", "namespace": "physics"}}])
    assert rc == 1
    assert findings(report, 0, "operator") == [
        "spec.virtualCluster: no VirtualCluster 'snfactory' in this namespace (have: "
        "other): create it or name one of them",
        "spec.nfs.backing.pvc.storageClass: no StorageClass 'gp3' in the cluster (have: "
        "gp2): name one of them or create it"]


# --- what validate relies on ---------------------------------------------------------

def test_packaged_crds_are_the_repository_crds() -> None:
    repo = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "crds").glob("*.yaml")}
    assert crd_texts() == repo, (
        "the CRDs shipped in the package differ from crds/: run "
        "`cp crds/*.yaml operator/src/nightshift/admission/crds/`")


# Functions and macros of standard CEL that cel-python provides.
STANDARD_CEL = {"size", "matches", "startsWith", "endsWith", "contains", "all", "exists",
                "exists_one", "filter", "map", "has", "int", "uint", "double", "string",
                "bool", "type", "dyn"}


def rules(node: Any) -> list[str]:
    """Every rule and messageExpression in a schema."""
    out: list[str] = []
    if isinstance(node, dict):
        for r in node.get("x-kubernetes-validations") or []:
            out += [r["rule"], *([r["messageExpression"]] if "messageExpression" in r else [])]
        for v in node.values():
            out += rules(v)
    elif isinstance(node, list):
        for v in node:
            out += rules(v)
    return out


def test_crd_rules_call_only_the_library_functions_provided() -> None:
    used: set[str] = set()
    exprs = [e for text in crd_texts().values() for e in rules(yaml.safe_load(text))]
    assert len(exprs) > 40
    for expr in exprs:
        used |= cel.functions_used(expr)
    assert used - STANDARD_CEL <= k8scel.LIBRARY, used - STANDARD_CEL - k8scel.LIBRARY
    assert used & k8scel.LIBRARY == k8scel.LIBRARY  # none provided in vain


@pytest.mark.parametrize(("text", "ok"), [
    ("10.0.0.0/16", True), ("10.0.3.7/16", True), ("fd00::/8", True), ("10.0.0.0", False),
    ("10.0.0.0/33", False), ("10.0.0.0/08", False), ("010.0.0.0/8", False),
    ("::ffff:10.0.0.0/104", False), ("fe80::1%eth0/64", False), ("everyone", False),
    ("10.0.0.0/255.0.0.0", False)])
def test_is_cidr_follows_netip_parse_prefix(text: str, ok: bool) -> None:
    assert k8scel.is_cidr(text) is ok


@pytest.mark.parametrize(("text", "ok", "scheme", "hostname"), [
    ("http://cvmfs.fnal.gov:8000/cvmfs/@fqrn@", True, "http", "cvmfs.fnal.gov"),
    ("HTTP://h/x", True, "http", "h"), ("http://[::1]:80/x", True, "http", "::1"),
    ("http:///path", True, "http", ""), ("mailto:x", True, "mailto", ""),
    ("/just/a/path", True, "", ""), ("http://a b/x", False, "", ""),
    ("http://h:8x/", False, "", ""), ("http://u@h/%zz", False, "", ""),
    ("relative/path", False, "", ""), ("", False, "", ""), ("1http://h/", False, "", "")])
def test_url_follows_go_parse_request_uri(text: str, ok: bool, scheme: str,
                                          hostname: str) -> None:
    assert k8scel.is_url(text) is ok
    if ok:
        u = k8scel.parse_request_uri(text)
        assert (u.scheme, u.hostname()) == (scheme, hostname)
