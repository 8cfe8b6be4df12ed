"""`nightshift validate --kubernetes-version`: admission errors worded as each release's
API server words them. From Kubernetes 1.35 a failed CEL rule shows the bad value (none
for an object or a list), where 1.34 showed the node's type ("object", "string").

tests/api_messages/v<release>.json are recordings of a real API server of that release
(tests/integration/test_validate_parity.py's recorder, with
NIGHTSHIFT_RECORD_API_MESSAGES set); the v1.34 recordings are the bad-input tables'
API_SERVER_MESSAGES (tests/unit/test_validate_cli.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.cli.main import main
from tests import bad_pipelineruns, bad_sharedstorages, bad_virtualclusters
from tests.clusterutil import ROOT

pytest.importorskip("celpy")

TABLES = {"pipelinerun": bad_pipelineruns, "virtualcluster": bad_virtualclusters,
          "sharedstorage": bad_sharedstorages}
RECORDED = {r["release"]: r for r in (json.loads(p.read_text()) for p in
                                      sorted((ROOT / "tests" / "api_messages").glob("v*.json")))}
NEWEST = max(RECORDED, key=lambda r: tuple(int(x) for x in r.split(".")))
CREATES = [(r, t, c[0], c[1]) for r in RECORDED for t, m in TABLES.items() for c in m.BAD
           if c[2] == "cel"]
UPDATES = [(r, *c[:3]) for r in RECORDED for c in bad_pipelineruns.BAD_UPDATES]


def admission(tmp_path: Path, capsys: pytest.CaptureFixture[str], obj: dict[str, Any],
              *flags: str) -> list[str]:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(obj))
    assert main(["validate", "-o", "json", *flags, str(path)]) == 1
    report = json.loads(capsys.readouterr().out)
    return sorted(f["text"] for f in report["objects"][0]["findings"]
                  if f["source"] == "admission")


def test_a_recording_exists_past_the_wording_change_and_covers_every_case() -> None:
    """Every case is recorded, or named in the recording's `unrecorded` (cases added
    after it was made, on a bed without that release: they are skipped below, never
    written by hand)."""
    assert any(int(r.split(".")[1]) >= 35 for r in RECORDED), sorted(RECORDED)
    for release, rec in RECORDED.items():
        for table, module in TABLES.items():
            later = set((rec.get("unrecorded") or {}).get(table) or ())
            assert set(rec["create"][table]) | later == \
                {c[0] for c in module.BAD if c[2] == "cel"}, (release, table)
            assert not later & set(rec["create"][table]), (release, table)
        later = set((rec.get("unrecorded") or {}).get("update") or ())
        assert set(rec["update"]) | later == {c[0] for c in bad_pipelineruns.BAD_UPDATES}, \
            release
        assert not later & set(rec["update"]), release


@pytest.mark.parametrize(("release", "table", "case", "manifest"), CREATES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CREATES])
def test_creates_are_refused_in_the_releases_words(
        release: str, table: str, case: str, manifest: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    if case not in RECORDED[release]["create"][table]:
        pytest.skip(f"{table} case {case} is not recorded on {release}: record it with "
                    "test_validate_parity.py's recorder on a bed of that release")
    got = admission(tmp_path, capsys, manifest, "--kubernetes-version", release)
    assert got == RECORDED[release]["create"][table][case]


@pytest.mark.parametrize(("release", "case", "base", "change"), UPDATES,
                         ids=[f"{c[0]}-{c[1]}" for c in UPDATES])
def test_updates_are_refused_in_the_releases_words(
        release: str, case: str, base: dict[str, Any], change: dict[str, Any],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(base))
    new = copy.deepcopy(base)
    new["spec"].update(change)
    if case not in RECORDED[release]["update"]:
        pytest.skip(f"update case {case} is not recorded on {release}: record it with "
                    "test_validate_parity.py's recorder on a bed of that release")
    got = admission(tmp_path, capsys, new, "--old", str(old), "--kubernetes-version", release)
    assert got == RECORDED[release]["update"][case]


def test_without_the_flag_the_words_are_the_newest_releases(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for table, case, manifest in [("pipelinerun", c[0], c[1]) for c in bad_pipelineruns.BAD
                                  if c[2] == "cel"][:8]:
        assert admission(tmp_path, capsys, manifest) == \
            RECORDED[NEWEST]["create"][table][case]
    # ...and 1.34's differ from them: the flag is what tells them apart.
    dup = next(c[1] for c in bad_pipelineruns.BAD if c[0] == "duplicate-stage-names")
    assert admission(tmp_path, capsys, dup, "--kubernetes-version", "v1.34.4") == \
        bad_pipelineruns.API_SERVER_MESSAGES["duplicate-stage-names"] != \
        RECORDED[NEWEST]["create"]["pipelinerun"]["duplicate-stage-names"]


@pytest.mark.parametrize("text", ["latest", "2.1", "1", "v1.x"])
def test_a_release_that_is_not_one_is_refused_with_the_form_to_use(
        text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(bad_pipelineruns.run()))
    with pytest.raises(SystemExit) as exit_:
        main(["validate", "--kubernetes-version", text, str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--kubernetes-version" in err and "write 1.N or v1.N.P" in err, err
