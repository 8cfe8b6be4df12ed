"""The fan-out bench's --any-cluster parts that need no cluster: the real task both sides
run, and the figures it leaves out rather than reporting as zero."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import jobbench
import pytest
from anycluster import IMAGE, NoAudit, NoBeside, task_stage
from fanout import measured_host
from jobbench import Timed, print_parts
from jobvariants import DELAY, only, rendered_job

from nightshift.api import names
from nightshift.pipelinerun import rangeitem


def _pod(job: dict) -> dict:  # type: ignore[type-arg]
    return job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_both_sides_run_a_real_sleep_on_the_named_pool_without_kwok_annotations() -> None:
    task = task_stage(1.0, "big", IMAGE)
    full, _ = rendered_job(40, "ns", 1.0, **task)
    bare = only(full, [])
    for job in (full, bare):
        pod = _pod(job)
        assert pod["nodeSelector"] == {names.LABEL_POOL: "big"}
        assert pod["tolerations"][0]["value"] == "big"
        assert not any(k.endswith(".stage.kwok.x-k8s.io/delay")
                       for k in (job["spec"]["template"]["metadata"].get("annotations") or {}))
        assert pod["containers"][0]["image"] == IMAGE
    # The bare Job runs the step's argv itself; the run's pod (a range stage's first
    # attempt) runs it under the inline wrapper, with no items volume.
    assert _pod(bare)["containers"][0]["command"] == ["sleep", "1"]
    full_cmd = _pod(full)["containers"][0]["command"]
    assert full_cmd[:3] == ["/bin/sh", "-c", rangeitem.RANGE_SH]
    assert full_cmd[full_cmd.index("--") + 1:] == ["sleep", "1"]


def test_the_local_beds_task_is_still_kwoks() -> None:
    job, _ = rendered_job(10, "ns", 2.0)
    assert job["spec"]["template"]["metadata"]["annotations"][DELAY] == "2s"


def test_runs_without_a_host_probe_get_no_host_figures() -> None:
    probed = [{"side": "bare", "host": {"chunk_ms": 8.1}},
              {"side": "run", "host": {"chunk_ms": 8.3}}]
    assert measured_host(probed)
    assert not measured_host([*probed[:1], {"side": "run", "host": {}}])
    assert NoBeside().finish() == {}
    assert NoAudit().since(NoAudit().mark()) == []


def test_parts_it_cannot_see_are_not_printed_as_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    monkeypatch.setattr(jobbench.console, "print",
                        lambda *a, **k: lines.append(" ".join(map(str, a))))
    blank = {"done_s": 1.0, "completion_s": None, "last_create_s": None,
             "last_bind_s": None, "load_start": 0.0, "load_end": 0.0, "pod_bytes": 0}
    print_parts(Timed(**blank))  # type: ignore[arg-type]
    assert lines == []
    print_parts(Timed(**blank, cpu={"etcd": 1.0}, pod_work={"create pod": 3}))  # type: ignore[arg-type]
    assert lines == ["      cpu s: etcd 1.0", "      pod writes: create pod 3"]
