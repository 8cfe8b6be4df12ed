"""A range stage's inline wrapper: printf's items are Python's, run by the real /bin/sh,
and only a first attempt that needs nothing else from the items volume gets it."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from nightshift.api import names
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun import jobs, rangeitem
from nightshift.pipelinerun.spec import PipelineRunSpec, RangeSource

RUN = it.RunRef(name="sn", namespace="survey", uid="uid-1")


@pytest.mark.parametrize("fmt", ["{}", "{0}", "{:d}", "{:04d}", "{:6d}", "{:0d}", "{:x}",
                                 "{:08X}", "{:o}", "night-{:04d}.fits", "{{x}}-{}%s\\n"])
@pytest.mark.parametrize("n", [0, 7, 255, 99999, 1234567])
def test_printf_renders_what_python_formats(fmt: str, n: int) -> None:
    got = rangeitem.printf_format(fmt, 0)
    assert got is not None
    assert got.render(n) == fmt.format(n)


@pytest.mark.parametrize("fmt", ["{:04d}", "{}", "{:5d}"])
@pytest.mark.parametrize("n", [-1, -42, -1000])
def test_negative_decimals_match_too(fmt: str, n: int) -> None:
    got = rangeitem.printf_format(fmt, -1000)
    assert got is not None and got.render(n) == fmt.format(n)


@pytest.mark.parametrize("fmt,from_", [
    ("{:>5}", 0), ("{:+d}", 0), ("{:,d}", 0), ("{:b}", 0), ("{!r}", 0), ("{:.3f}", 0),
    ("{:x}", -5), ("{:o}", -1), ("{:<06d}", 0), ("{} {}", 0), ("plain", 0),
    ("{:100d}", 0), ("{:_x}", 0), ("{", 0)])
def test_formats_printf_would_render_differently_keep_run_sh(fmt: str, from_: int) -> None:
    assert rangeitem.printf_format(fmt, from_) is None


# Arguments the step must get byte for byte: the wrapper never reads them as shell text
# or as a printf format.
HOSTILE_ARGS = ["a b", "$HOME", "`id`", "%s%%\\n", "", "--", "it's \"x\"", "*"]


def sh(argv: list[str], index: int, **env: str) -> dict[str, str]:
    """Run the wrapper under the real /bin/sh; the step prints its argv and NIGHTSHIFT_*."""
    script = 'printf "<%s>\\n" "$@"; env | grep "^NIGHTSHIFT_" | sort'
    full = [*argv, "/bin/sh", "-c", script, "step", *HOSTILE_ARGS]
    out = subprocess.run(full, env={"PATH": os.environ["PATH"],
                                    names.ENV_COMPLETION_INDEX: str(index), **env},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    n = len(HOSTILE_ARGS)
    args, envs = out[:n], out[n:]
    return {"args": "|".join(args), **dict(e.split("=", 1) for e in envs)}


@pytest.mark.parametrize("range_", [
    {"from": 0, "to": 99, "format": "night-{:04d}"},
    {"from": 3, "to": 300, "step": 7, "format": "a%b\\c'{:03x}\" $HOME `id` {{}}"},
    {"from": -20, "to": 5, "step": 5},
])
def test_the_shell_wrapper_gives_each_index_its_item_as_run_sh_would(
        range_: dict[str, Any]) -> None:
    r = RangeSource.model_validate(range_)
    expected = it.item_list(PipelineRunSpec.model_validate(
        {"stages": [{"name": "s", "image": "i", "forEach": {"range": range_},
                     "steps": [{"name": "m", "command": ["x"]}]}]}).stages[0].for_each)
    argv = rangeitem.inline_argv(r, ["x"], run="sn", stage="reduce", namespace="survey",
                                 last_step="fit")
    assert argv is not None
    for index in sorted({0, 1, len(expected) // 2, len(expected) - 1}):
        got = sh(argv, index)
        item = expected[index]
        # The step's argv exactly as given, each argument one.
        assert got["args"] == "|".join(f"<{a}>" for a in HOSTILE_ARGS)
        assert got[names.ENV_ITEM] == item and got[names.ENV_ITEM_INDEX] == str(index)
        assert (got[names.ENV_RUN], got[names.ENV_STAGE], got[names.ENV_NAMESPACE],
                got[names.ENV_LAST_STEP], got[names.ENV_ATTEMPT]) == (
                    "sn", "reduce", "survey", "fit", "0")
        # No items volume, so no items file to name.
        assert names.ENV_ITEMS_FILE not in got


@pytest.mark.parametrize("argv", [["x", "{item}"], ["{index}"], ["awk", "{print}"],
                                  ["x", "{"]])
def test_a_step_with_a_brace_in_its_argv_keeps_run_sh(argv: list[str]) -> None:
    r = RangeSource.model_validate({"from": 0, "to": 9})
    assert rangeitem.inline_argv(r, argv, run="r", stage="s", namespace="n",
                                 last_step="m") is None


def test_the_wrapper_refuses_to_run_outside_an_indexed_job() -> None:
    argv = rangeitem.inline_argv(RangeSource.model_validate({"from": 0, "to": 1}), ["true"],
                                 run="r", stage="s", namespace="n", last_step="m")
    assert argv is not None
    done = subprocess.run([*argv, "true"], env={"PATH": os.environ["PATH"]},
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "Indexed Job" in done.stderr


def render(attempt: int = 0, **stage: Any) -> dict[str, Any]:
    body = {"name": "fit", "image": "i", "steps": [{"name": "m", "command": ["x", "--all"]}],
            "forEach": {"range": {"from": 0, "to": 9}}, **stage}
    spec = PipelineRunSpec.model_validate(
        {"stages": [body], "storage": [{"name": "s3", "s3": {"bucket": "b"}}]})
    return jobs.render_job(run=RUN, spec=spec, stage=spec.stages[0], attempt=attempt,
                           completions=10, item_configmaps=["cm"], parallelism=10,
                           suspend=False, runner_image="runner:dev")


def uses_volume(job: dict[str, Any]) -> bool:
    pod = job["spec"]["template"]["spec"]
    cmd = pod["containers"][0]["command"]
    has_volume = any(v["name"] == "nightshift-items" for v in pod.get("volumes", []))
    assert (cmd[1] == f"{names.MOUNT_ITEMS}/{names.RUN_SH_KEY}") == has_volume
    assert (cmd[:3] == ["/bin/sh", "-c", rangeitem.RANGE_SH]) != has_volume
    return has_volume


def test_a_plain_range_stage_runs_without_the_items_volume() -> None:
    job = render()
    assert not uses_volume(job)
    assert "volumes" not in job["spec"]["template"]["spec"]
    assert "volumeMounts" not in job["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("attempt,stage", [
    (1, {}),  # a retry: its indexes map completion index to item
    (0, {"batch": 3}),  # the batch loop reads its items from the list
    (0, {"outputs": [{"storage": "s3", "path": "out/{item}/"}]}),  # the runner reads it
    (0, {"forEach": {"items": ["a", "b"]}}),  # a list only the volume holds
    (0, {"steps": [{"name": "m", "command": ["x"], "args": ["{item}"]}]}),  # run.sh replaces
    (0, {"steps": [{"name": "get", "command": ["x", "{index}"]},  # in any step's argv
                   {"name": "m", "command": ["x"]}]}),
    (0, {"forEach": {"range": {"from": 0, "to": 9, "format": "{:>4}"}}}),  # not printf's
])
def test_what_needs_the_volume_keeps_it(attempt: int, stage: dict[str, Any]) -> None:
    assert uses_volume(render(attempt, **stage))
