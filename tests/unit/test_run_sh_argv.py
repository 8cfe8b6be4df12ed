"""run.sh replaces {item}, {index} and matrix {<field>} in the step's argv, in a real
/bin/sh (dash here), one argument each, and exactly as itemfields.expand does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nightshift.api import itemfields, names
from nightshift.api.itemfields import argv_values, expand, split_fields
from nightshift.pipelinerun import items as render_items
from nightshift.pipelinerun.spec import ForEach

RUN = render_items.RunRef(name="r", namespace="ns", uid="u")
# Prints each argument it gets, NUL-terminated, into $OUT; its own text holds no brace.
PRINT = ["/bin/sh", "-c", 'for a do printf "%s\\0" "$a"; done > "$OUT"', "sh"]
HOSTILE = ["a b", "  lead", "'q'", '"dq"', "$(touch PWNED)", "`touch PWNED`", "*", "?",
           "[a]", "-n", "--", "-e", "\\", "$HOME", "${x}", ";", "|", "&", "é", "%s"]


def run_sh(tmp: Path, items: list[str], ci: int, args: list[str],
           fields: tuple[str, ...] = ()) -> list[str]:
    folder = tmp / "items"
    folder.mkdir(exist_ok=True)
    for cm in render_items.items_configmaps(RUN, "s", items, last_step="main"):
        for key, value in cm["data"].items():
            (folder / key).write_text(value, encoding="utf-8")
    out = tmp / "argv"
    env = {"PATH": "/usr/bin:/bin", names.ENV_COMPLETION_INDEX: str(ci), "OUT": str(out)}
    if fields:
        env[names.ENV_ITEM_FIELDS] = " ".join(fields)
    subprocess.run(["/bin/sh", str(folder / names.RUN_SH_KEY), "step", "--", *PRINT, *args],
                   env=env, cwd=tmp, check=True)
    assert not (tmp / "PWNED").exists()
    return out.read_bytes().decode("utf-8").split("\0")[:-1]  # keeps \r as it is


def python_side(items: list[str], ci: int, args: list[str],
                fields: tuple[str, ...] = ()) -> list[str]:
    values = argv_values(items[ci], ci, split_fields(items[ci], fields))
    return [expand(a, values) for a in args]


def test_placeholders_hostile_items_and_literal_braces(tmp_path: Path) -> None:
    items = HOSTILE
    args = ["{item}", "--in={item}.fits", "{index}", "{}", "{x}", "{{item}}", "{item",
            "item}", "}{item}{", "{index}{item}{index}", "", "two words", "*"]
    for ci, item in enumerate(items):
        got = run_sh(tmp_path, items, ci, args)
        assert got == [item, f"--in={item}.fits", str(ci), "{}", "{x}", "{" + item + "}",
                       "{item", "item}", "}" + item + "{", f"{ci}{item}{ci}", "",
                       "two words", "*"]
        assert got == python_side(items, ci, args)


def test_a_value_holding_a_placeholder_is_not_expanded_again(tmp_path: Path) -> None:
    items = ["{index}", "{site}/{item}"]
    assert run_sh(tmp_path, items, 0, ["{item}"]) == ["{index}"]
    got = run_sh(tmp_path, items, 1, ["{item}|{site}|{source}"], ("site", "source"))
    assert got == ["{site}/{item}|{site}|{item}"]


def test_matrix_fields_in_argv_and_env(tmp_path: Path) -> None:
    fe = ForEach.model_validate(
        {"matrix": {"source": ["northridge", "$(id) x"], "site": ["LAX", "-n"]}})
    fields = render_items.matrix_fields(fe)
    items = render_items.item_list(fe)
    args = ["--site={site}", "{source}", "{item}", "{index}", "{site}{source}", "{sites}"]
    for ci in range(len(items)):
        got = run_sh(tmp_path, items, ci, args, fields)
        assert got == python_side(items, ci, args, fields)
    assert run_sh(tmp_path, items, 3, args, fields) == [
        "--site=-n", "$(id) x", "-n/$(id) x", "3", "-n$(id) x", "{sites}"]


def test_the_command_itself_is_expanded(tmp_path: Path) -> None:
    (tmp_path / "tool-a").write_text('#!/bin/sh\nprintf "%s\\0" "$0" "$@" > "$OUT"\n')
    (tmp_path / "tool-a").chmod(0o755)
    folder = tmp_path / "items"
    folder.mkdir()
    for cm in render_items.items_configmaps(RUN, "s", ["a", "b c"], last_step="main"):
        for key, value in cm["data"].items():
            (folder / key).write_text(value)
    out = tmp_path / "argv"
    subprocess.run(["/bin/sh", str(folder / "run.sh"), "step", "--",
                    str(tmp_path / "tool-{item}"), "x{item}"],
                   env={"PATH": "/usr/bin:/bin", names.ENV_COMPLETION_INDEX: "0",
                        "OUT": str(out)}, check=True)
    assert out.read_text().split("\0")[:-1] == [str(tmp_path / "tool-a"), "xa"]


def test_the_shell_snippets_use_the_python_separator() -> None:
    assert itemfields.FIELD_SEP == "/"
    assert "fr=$item/" in itemfields.SH_ARGV
    code = [line for line in render_items.RUN_SH.splitlines()
            if not line.lstrip().startswith("#")]
    assert not [line for line in code if re.search(r"\beval\b", line)]


ARG = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"),
              max_size=12) | st.lists(
    st.sampled_from(["{", "}", "{item}", "{index}", "{site}", "{src}", "x", " ", "$", "*",
                     "`", "'", "-", "\n"]), max_size=8).map("".join)
VALUE = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="/\t\n\r\0"),
                min_size=1, max_size=6) | st.sampled_from([*HOSTILE[:-2], "{item}", "{src}"])


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(args=st.lists(ARG, max_size=6), site=VALUE, src=VALUE, matrix=st.booleans())
def test_shell_and_python_expand_alike(tmp_path: Path, args: list[str], site: str, src: str,
                                       matrix: bool) -> None:
    fields = ("site", "src") if matrix else ()
    item = f"{site}/{src}" if matrix else site
    if render_items.item_problem(item):
        return
    assert run_sh(tmp_path, [item], 0, args, fields) == python_side([item], 0, args, fields)


@pytest.mark.parametrize("fields", ["Bad", "a-b", "*"])
def test_a_bad_field_name_stops_the_pod(tmp_path: Path, fields: str) -> None:
    folder = tmp_path / "items"
    folder.mkdir()
    for cm in render_items.items_configmaps(RUN, "s", ["a"], last_step="main"):
        for key, value in cm["data"].items():
            (folder / key).write_text(value)
    (tmp_path / "abc").write_text("")  # a glob of the field list would find this name
    r = subprocess.run(["/bin/sh", str(folder / "run.sh"), "step", "--", "true"], check=False,
                       env={"PATH": "/usr/bin:/bin", names.ENV_COMPLETION_INDEX: "0",
                            names.ENV_ITEM_FIELDS: fields},
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr


def test_the_stage_env_file_reaches_the_step_and_retries_keep_their_attempt(
        tmp_path: Path) -> None:
    """First-attempt pods carry no NIGHTSHIFT_* identity in their env: run.sh exports it
    from stage.env, as data (a hostile value is never run), and the attempt defaults to
    0; a retry pod's own NIGHTSHIFT_ATTEMPT stays."""
    folder = tmp_path / "items"
    folder.mkdir()
    for cm in render_items.items_configmaps(RUN, "s", ["a"], last_step="main"):
        for key, value in cm["data"].items():
            (folder / key).write_text(value, encoding="utf-8")
    # What an older or tampered file could hold: only NIGHTSHIFT_* keys are exported.
    with (folder / names.STAGE_ENV_KEY).open("a") as f:
        f.write("PATH=/nowhere\nNIGHTSHIFT_X=$(touch PWNED) `id`\n")
    show = ["/bin/sh", "-c", 'env | grep "^NIGHTSHIFT_" | sort > "$OUT"; echo "$PATH" >> "$OUT"']

    def env_of(**extra: str) -> dict[str, str]:
        out = tmp_path / "env"
        env = {"PATH": "/usr/bin:/bin", names.ENV_COMPLETION_INDEX: "0", "OUT": str(out),
               **extra}
        subprocess.run(["/bin/sh", str(folder / names.RUN_SH_KEY), "main", "--", *show],
                       env=env, cwd=tmp_path, check=True)
        lines = out.read_text().splitlines()
        assert lines[-1] == "/usr/bin:/bin"
        return dict(line.split("=", 1) for line in lines[:-1])

    first = env_of()
    assert not (tmp_path / "PWNED").exists()
    assert first[names.ENV_RUN] == "r" and first[names.ENV_NAMESPACE] == "ns"
    assert first[names.ENV_STAGE] == "s" and first[names.ENV_LAST_STEP] == "main"
    assert first[names.ENV_ITEMS_FILE] == names.ITEMS_FILE
    assert first[names.ENV_ATTEMPT] == "0" and first[names.ENV_ITEM] == "a"
    assert first["NIGHTSHIFT_X"] == "$(touch PWNED) `id`"
    assert env_of(**{names.ENV_ATTEMPT: "2"})[names.ENV_ATTEMPT] == "2"
