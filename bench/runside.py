"""The PipelineRun side of the local-cluster benches: the operator the bench starts,
a one-stage run timed to Succeeded with its operator's writes, the drain after it, and
the two namespaces (the bare Job's and the run's) the benches use.

Shared by bench/fanout.py, argo.py, barrier.py, batching.py and lateref.py; not part of
CI. The bare side's run (a Job the bench creates itself) is bench/jobbench.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from auditlog import WRITES, foreign_writes, pod_work, pod_writes, ts
from jobbench import Bench, Timed, k8s_time, loadavg, progress
from jobvariants import stage
from profiles import note_window_work

from nightshift.api import names

NS_JOB, NS_RUN = "bench-fanout-job", "bench-fanout-run"
OPERATOR = "nightshift-operator"


def pipelinerun(n: int, task_s: float, **stage_extra: Any) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": "fan", "namespace": NS_RUN},
            "spec": {"stages": [stage(n, task_s, **stage_extra)]}}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_operator(bench: Bench) -> subprocess.Popen[bytes]:
    lay = bench.layout
    env_of = getattr(lay, "operator_env", None)
    extra = env_of() if env_of else {
        "KUBECONFIG": str(lay.state / "kubeconfigs" / "operator.yaml")}
    log = lay.logs / f"bench-operator-{int(time.time())}.log"
    with log.open("wb") as out:
        op = subprocess.Popen([sys.executable, "-m", "nightshift.cli.main", "operator",
                               "--health-port", "0", "--namespace", NS_RUN],
                              stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **extra})
    time.sleep(3)  # kopf's watches start: not part of any measured run
    return op


def run_pipelinerun(bench: Bench, n: int, task_s: float, label: str, timeout: float,
                    pods: int | None = None, **stage_extra: Any
                    ) -> tuple[Timed, dict[str, Any]]:
    """Create the PipelineRun, time it to Succeeded; its Job's completion on the way.
    `pods`: the Job's completions when they are not one per item (a batched stage)."""
    kube = bench.kube
    load_start = loadavg()
    mark = bench.audit.mark()
    cpu0 = bench.cpu()
    with bench.beside(label) as beside:
        t0 = time.time()
        bench.create(pipelinerun(n, task_s, **stage_extra))
        run: dict[str, Any] = {}
        # One read per poll, the run's, as the bare side reads its Job once: a second
        # poll (its Job's) was API-server work on the run's side only. The progress
        # bar follows the run's own count (written at most every 10 s).
        with progress(label, pods or n) as update:
            while True:
                run = kube.get(names.API_VERSION, names.PIPELINERUN, "fan", NS_RUN) or {}
                status = run.get("status") or {}
                update(int(status.get("succeeded") or 0))
                phase = status.get("phase")
                if phase in ("Succeeded", "Failed"):
                    t_done = time.time()
                    break
                if time.time() - t0 > timeout:
                    raise RuntimeError(f"{label}: not done after {timeout:.0f} s "
                                       f"({status.get('progress', '?')})")
                if time.time() - t0 > 60 and not status:
                    raise RuntimeError(f"{label}: the run has no status 60 s after its "
                                       f"create: is an operator watching namespace {NS_RUN}?")
                time.sleep(0.25)
        t_job_done = job_done_at(bench, t_done)
        host = beside.finish()
    if phase != "Succeeded":
        raise RuntimeError(f"{label}: the run ended {phase}")
    cpu = bench.cpu_since(cpu0)
    entries = bench.audit.since(mark)
    creates = pod_writes(entries, NS_RUN, None)
    binds = pod_writes(entries, NS_RUN, "binding")
    note_window_work(host, entries, NS_RUN, t0)
    writes = [e for e in entries
              if (e.get("user") or {}).get("username") == OPERATOR
              and e.get("verb") in WRITES and e.get("stage") == "ResponseComplete"
              and (e.get("objectRef") or {}).get("namespace") == NS_RUN]
    # The operator server-side-applies its Job: the first write to jobs is its creation.
    job_created = [e for e in writes if e["verb"] in ("create", "patch")
                   and e["objectRef"].get("resource") == "jobs"
                   and not e["objectRef"].get("subresource")]
    timed = Timed(done_s=round(t_done - t0, 2), completion_s=None,
                  last_create_s=round(creates[-1] - t0, 2) if creates else None,
                  last_bind_s=round(binds[-1] - t0, 2) if binds else None,
                  load_start=load_start, load_end=loadavg(), pod_bytes=0, cpu=cpu,
                  foreign_writes=foreign_writes(entries, (NS_RUN,)),
                  pod_work=pod_work(entries, NS_RUN), host=host)
    status = run.get("status") or {}
    audited = bench.audited  # no audit log on --any-cluster: unknown, not zero
    extra = {
        "job_done_s": round(t_job_done - t0, 2) if t_job_done else None,
        "job_created_s": round(ts(job_created[0]) - t0, 2) if job_created else None,
        "operator_writes": len(writes) if audited else None,
        "writes_per_item": round(len(writes) / n, 5) if audited else None,
        "write_kinds": _kinds(writes) if audited else None,
        "status_bytes": len(json.dumps(status)),
    }
    return timed, extra


def job_done_at(bench: Bench, t_done: float) -> float | None:
    """When the run's Job said Complete: its condition's time (to the second, the API
    server's clock). The run counts its Job's SuccessCriteriaMet, which the Job
    controller sets just before Complete, so the run may say Succeeded first: wait
    up to 30 s for it."""
    while True:
        jobs = bench.kube.list("batch/v1", "Job", NS_RUN, label_selector=f"{names.LABEL_RUN}=fan")
        conds = [c for j in jobs for c in (j.get("status") or {}).get("conditions") or []
                 if c["type"] == "Complete" and c["status"] == "True"]
        if conds:
            return k8s_time(conds[0]["lastTransitionTime"])
        if time.time() - t_done > 30:
            return None
        time.sleep(0.25)


def drain_run(bench: Bench, name: str = "fan") -> float:
    """The run's namespace drained, the run gone first (its Job and ConfigMaps by owner)."""
    return bench.drain(NS_RUN, (names.API_VERSION, names.PIPELINERUN, name))


def _kinds(writes: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in writes:
        ref = w.get("objectRef") or {}
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        key = f"{w['verb']} {ref.get('resource')}{sub}"
        out[key] = out.get(key, 0) + 1
    return out
