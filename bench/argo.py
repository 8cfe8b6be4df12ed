"""Argo Workflows side by side with a PipelineRun and bare Indexed Jobs, on the same nodes.

Not part of CI. On the local cluster, with Argo's controller built once:

    hack/build-upstream.sh argo                   # ARGO_VERSION in hack/versions.env
    .venv/bin/nightshift-localcluster up
    .venv/bin/python bench/argo.py                # 1k, 2k fan-outs x3, 10k x1, 3 x 1k x3

Shapes: an N-item fan-out of 1-s tasks, and a 3-stage barrier pipeline (each stage N
items, the next starting when the previous is done). Sides, each in its own namespace,
on the same 20 KWOK nodes, alternating (the order rotates every repetition) with the
test bed drained between runs (bench/jobbench.py: no pod left, the control plane idle):
- bare: the operator's own Job for the stage with every feature removed (bench/
  jobvariants.py), created by this script; the pipeline's stages one after the other;
- pipelinerun: a PipelineRun, reconciled by an operator this script starts;
- argo-default: a Workflow (steps, withSequence) under Argo's workflow-controller with
  its default flags (--qps 20 --burst 30, 32 workflow workers);
- argo-tuned: the same with --qps 500 --burst 1000 and 8 pod-cleanup workers, as
  Argo's scaling guide suggests for large workflows.
Per run: time to all pods created (the API server's audit log), time to done (Job
Complete / run Succeeded / Workflow Succeeded, polled every 0.25 s), the controller's
peak RSS (VmHWM) and API writes (audit log, by its user), every write in the namespace,
and the top object's size. Results: bench/results/argo-<time>.json and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from auditlog import WRITES, pod_writes
from jobbench import (
    POOL,
    Bench,
    console,
    loadavg,
    prepared,
    progress,
    results_path,
    stats,
    testbed,
)
from jobvariants import only, rendered_job, stage
from rich.table import Table
from runside import NS_JOB, NS_RUN, OPERATOR, drain_run, peak_rss_mb, start_operator

from nightshift.api import names
from nightshift.simulate import convert

NS_ARGO = "bench-argo"
ARGO_SA = "argo-bench"
ARGO_USER = f"system:serviceaccount:{NS_ARGO}:{ARGO_SA}"
WF_API = "argoproj.io/v1alpha1"
# KWOK's init-container stages wait 1-5 s each by default; Argo's emissary pods have an
# init container (it copies argoexec), which on a real node takes about a second.
INSTANT_INIT = {f"pod-init-container-{s}.stage.kwok.x-k8s.io/{k}": "0s"
                for s in ("running", "completed") for k in ("delay", "jitter-delay")}


def argo_task(task_s: float) -> dict[str, str]:
    """KWOK's pod-complete stage ends only pods a Job owns; Argo's pods are the
    Workflow's. Our own stage (hack/kwok/pod-sim-duration.yaml) ends any pod after the
    one duration listed: the same task as kwok_task() gives the Jobs' pods."""
    return {convert.SIM_SECONDS: f"{task_s:g}", convert.SIM_SEED: "0",
            convert.KWOK_WEIGHT: "0", **INSTANT_INIT}
TUNED = ["--qps", "500", "--burst", "1000", "--pod-cleanup-workers", "8"]
SIDES = ("bare", "pipelinerun", "argo-default", "argo-tuned")


def argo_binary() -> Path:
    lay = testbed("paths").Layout.discover()
    version = lay.versions["ARGO_VERSION"]
    exe = lay.cache / "bin" / f"argo-workflows-{version}" / "workflow-controller"
    if not exe.exists():
        sys.exit(f"{exe} is missing: run `hack/build-upstream.sh argo` first")
    return Path(exe)


def argo_crds(bench: Bench) -> None:
    lay = testbed("paths").Layout.discover()
    src = lay.module_dir("github.com/argoproj/argo-workflows/v3", "ARGO_VERSION")
    crds = Path(src) / "manifests" / "base" / "crds" / "minimal"
    for f in sorted(crds.glob("argoproj.io_*.yaml")):
        bench.kube.apply(yaml.safe_load(f.read_text()))


def argo_kubeconfig(bench: Bench) -> Path:
    """A kubeconfig for a ServiceAccount, so the audit log names Argo's writes."""
    k = bench.kube
    k.apply({"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": ARGO_SA, "namespace": NS_ARGO}})
    k.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": ARGO_SA},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "cluster-admin"},
             "subjects": [{"kind": "ServiceAccount", "name": ARGO_SA, "namespace": NS_ARGO}]})
    tok = k._call("POST", k.path("v1", "ServiceAccount", NS_ARGO, ARGO_SA, "token"),
                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 86400}})["status"]["token"]
    base = yaml.safe_load(bench.layout.kubeconfig.read_text())
    cluster = base["clusters"][0]["cluster"]
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "argo",
           "clusters": [{"name": "local", "cluster": cluster}],
           "users": [{"name": ARGO_SA, "user": {"token": tok}}],
           # The controller reads its ConfigMap from its context's namespace.
           "contexts": [{"name": "argo", "context": {"cluster": "local", "user": ARGO_SA,
                                                     "namespace": NS_ARGO}}]}
    path = bench.layout.state / "kubeconfigs" / "argo-bench.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return Path(path)


def start_argo(bench: Bench, kubeconfig: Path, tuned: bool) -> subprocess.Popen[bytes]:
    bench.kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "workflow-controller-configmap", "namespace": NS_ARGO}, "data": {}})
    log = bench.layout.logs / f"bench-argo-{'tuned' if tuned else 'default'}.log"
    env = {**os.environ, "LEADER_ELECTION_DISABLE": "true", "KUBECONFIG": str(kubeconfig)}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(argo_binary()), "--namespaced", "--managed-namespace", NS_ARGO,
             "--executor-image", "quay.io/argoproj/argoexec:bench", "--loglevel", "warn",
             *(TUNED if tuned else [])],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    time.sleep(5)  # informers sync: not part of any measured run
    if proc.poll() is not None:
        sys.exit(f"workflow-controller exited {proc.returncode}; see {log}")
    return proc


def workflow(stages: int, n: int, task_s: float) -> dict[str, Any]:
    steps = [[{"name": f"s{i}", "template": "task", "withSequence": {"count": str(n)}}]
             for i in range(stages)]
    return {"apiVersion": WF_API, "kind": "Workflow",
            "metadata": {"name": "fan", "namespace": NS_ARGO},
            "spec": {"entrypoint": "main", "serviceAccountName": "default",
                     "nodeSelector": {names.LABEL_POOL: POOL},
                     "tolerations": [{"key": names.TAINT_POOL, "operator": "Exists"}],
                     "templates": [
                         {"name": "main", "steps": steps},
                         {"name": "task",
                          "metadata": {"annotations": argo_task(task_s)},
                          "container": {"image": "busybox:1.36", "command": ["true"]}}]}}


def pipelinerun(stages: int, n: int, task_s: float) -> dict[str, Any]:
    sts = []
    for i in range(stages):
        s = stage(n, task_s, name=f"s{i}")
        if i:
            s["dependsOn"] = [f"s{i - 1}"]
        sts.append(s)
    return {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
            "metadata": {"name": "fan", "namespace": NS_RUN}, "spec": {"stages": sts}}


def writes_by(entries: list[dict[str, Any]], ns: str, user: str | None) -> int:
    return sum(1 for e in entries
               if e.get("verb") in WRITES and e.get("stage") == "ResponseComplete"
               and (e.get("objectRef") or {}).get("namespace") == ns
               and (user is None or (e.get("user") or {}).get("username") == user))


def wait_done(label: str, total: int, done: Callable[[], tuple[int, str | None]],
              timeout: float) -> tuple[float, str]:
    t0 = time.time()
    with progress(label, total) as update:
        while True:
            count, phase = done()
            update(count)
            if phase:
                return time.time(), phase
            if time.time() - t0 > timeout:
                return time.time(), f"timeout after {timeout:.0f} s"
            time.sleep(0.25)


def run_side(bench: Bench, side: str, stages: int, n: int, task_s: float, label: str,
             timeout: float) -> dict[str, Any]:
    k = bench.kube
    ns = {"bare": NS_JOB, "pipelinerun": NS_RUN}.get(side, NS_ARGO)
    mark, load0, t0 = bench.audit.mark(), loadavg(), time.time()
    top_bytes = 0
    if side == "bare":
        phase = "Succeeded"
        for i in range(stages):
            job, _ = rendered_job(n, NS_JOB, task_s)
            job = only(job, [])
            job["metadata"]["name"] = f"fan-s{i}"
            bench.create(job)

            def job_done(name: str = f"fan-s{i}") -> tuple[int, str | None]:
                j = k.get("batch/v1", "Job", name, NS_JOB) or {}
                conds = [c["type"] for c in (j.get("status") or {}).get("conditions") or []
                         if c.get("status") == "True" and c["type"] in ("Complete", "Failed")]
                return int((j.get("status") or {}).get("succeeded") or 0), (
                    conds[0] if conds else None)
            t_end, cond = wait_done(f"{label} stage {i + 1}", n, job_done, timeout)
            top_bytes = max(top_bytes, len(json.dumps(k.get("batch/v1", "Job", f"fan-s{i}",
                                                            NS_JOB))))
            if cond != "Complete":
                phase = cond
                break
        user = None
    elif side == "pipelinerun":
        bench.create(pipelinerun(stages, n, task_s))

        def run_done() -> tuple[int, str | None]:
            r = k.get(names.API_VERSION, names.PIPELINERUN, "fan", NS_RUN) or {}
            st = r.get("status") or {}
            count = sum(int(s.get("succeeded") or 0) for s in st.get("stages") or [])
            p = st.get("phase")
            return count, (p if p in ("Succeeded", "Failed") else None)
        t_end, phase = wait_done(label, stages * n, run_done, timeout)
        top_bytes = len(json.dumps(k.get(names.API_VERSION, names.PIPELINERUN, "fan", NS_RUN)))
        user = OPERATOR
    else:
        bench.create(workflow(stages, n, task_s))

        def wf_done() -> tuple[int, str | None]:
            # Metadata only: the Workflow's status holds a node per pod (MBs at 10k).
            metas = k.list_metadata(WF_API, "Workflow", NS_ARGO)
            p = ((metas[0].get("metadata") or {}).get("labels") or {}).get(
                "workflows.argoproj.io/phase") if metas else None
            return 0, (p if p in ("Succeeded", "Failed", "Error") else None)
        t_end, phase = wait_done(label, stages * n, wf_done, timeout)
        top_bytes = len(json.dumps(k.get(WF_API, "Workflow", "fan", NS_ARGO)))
        user = ARGO_USER
    entries = bench.audit.since(mark)
    creates = pod_writes(entries, ns, None)
    return {"side": side, "phase": phase, "done_s": round(t_end - t0, 2),
            "pods_created": len(creates),
            "all_created_s": round(creates[-1] - t0, 2) if creates else None,
            "controller_writes": writes_by(entries, ns, user) if user else 0,
            "namespace_writes": writes_by(entries, ns, None),
            "top_object_bytes": top_bytes, "load": [load0, loadavg()]}


def drain(bench: Bench, side: str) -> float:
    if side == "bare":
        return bench.drain(NS_JOB)
    if side == "pipelinerun":
        return drain_run(bench)
    return bench.drain(NS_ARGO, (WF_API, "Workflow", "fan"))


def one_shape(bench: Bench, stages: int, n: int, reps: int, sides: list[str],
              argo_kc: Path, task_s: float, cap: float | None = None) -> dict[str, Any]:
    shape = f"{n:,} items" if stages == 1 else f"{stages} stages x {n:,} items"
    console.print(f"[bold]{shape}[/], {reps} repetition(s), sides {sides}; "
                  f"load average {loadavg()}")
    timeout = cap or max(900.0, stages * n / 5)
    runs: list[dict[str, Any]] = []
    rss: dict[str, list[float]] = {}
    for rep in range(reps):
        order = sides[rep % len(sides):] + sides[:rep % len(sides)]
        for side in order:
            label = f"rep {rep + 1}/{reps} {side}"
            proc = None
            if side == "pipelinerun":
                proc = start_operator(bench)
            elif side.startswith("argo"):
                proc = start_argo(bench, argo_kc, side == "argo-tuned")
            try:
                r = run_side(bench, side, stages, n, task_s, label, timeout)
                if proc:
                    r["controller_rss_mb"] = round(peak_rss_mb(proc.pid), 1)
                    rss.setdefault(side, []).append(r["controller_rss_mb"])
                r["drain_s"] = round(drain(bench, side), 1)
            finally:
                if proc:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
            r["rep"] = rep + 1
            runs.append(r)
            console.print(f"  {label:24} {r['phase']:9} done {r['done_s']:7.1f} s  all pods "
                          f"created {r['all_created_s']} s  controller writes "
                          f"{r['controller_writes']}  namespace writes "
                          f"{r['namespace_writes']}  top object {r['top_object_bytes']:,} B  "
                          f"RSS {r.get('controller_rss_mb', '-')} MB  drain {r['drain_s']} s")
    out: dict[str, Any] = {"stages": stages, "items": n, "reps": reps, "runs": runs}
    for side in sides:
        mine = [r for r in runs if r["side"] == side and r["phase"] in ("Succeeded",
                                                                         "Complete")]
        if mine:
            out[side] = {
                "done_s": stats([r["done_s"] for r in mine]),
                "all_created_s": stats([r["all_created_s"] or 0.0 for r in mine]),
                "controller_writes": stats([float(r["controller_writes"]) for r in mine]),
                "namespace_writes": stats([float(r["namespace_writes"]) for r in mine]),
                "top_object_bytes": max(r["top_object_bytes"] for r in mine),
                "controller_rss_mb": max(rss.get(side) or [0.0]),
                "ok": len(mine)}
        else:
            out[side] = {"ok": 0, "phases": [r["phase"] for r in runs if r["side"] == side]}
    return out


def table(results: list[dict[str, Any]], sides: list[str]) -> Table:
    t = Table(title="time to done and to all pods created (s, min/median/max), the "
                    "controller's writes, peak RSS and top object")
    for col in ("shape", "side", "runs ok", "done s", "all pods created s",
                "controller writes", "all writes in ns", "RSS MB", "top object B"):
        t.add_column(col, justify="right")
    for res in results:
        shape = (f"{res['items']:,}" if res["stages"] == 1
                 else f"{res['stages']} x {res['items']:,}")
        for side in sides:
            s = res[side]
            if not s["ok"]:
                t.add_row(shape, side, f"0/{res['reps']}", ", ".join(s["phases"]), "", "", "",
                          "", "")
                continue

            def mmm(v: tuple[float, float, float], fmt: str = "{:.1f}") -> str:
                return "/".join(fmt.format(x) for x in v)
            t.add_row(shape, side, f"{s['ok']}/{res['reps']}", mmm(s["done_s"]),
                      mmm(s["all_created_s"]), mmm(s["controller_writes"], "{:.0f}"),
                      mmm(s["namespace_writes"], "{:.0f}"),
                      f"{s['controller_rss_mb']:.0f}" if s["controller_rss_mb"] else "-",
                      f"{s['top_object_bytes']:,}")
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fanout", type=int, nargs="*", default=[1000, 2000],
                    help="fan-out sizes run --reps times")
    ap.add_argument("--once", type=int, nargs="*", default=[10000],
                    help="fan-out sizes run once per side")
    ap.add_argument("--pipeline", type=int, default=1000,
                    help="items per stage of the 3-stage pipeline (0: skip)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--task-seconds", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds a side may take before it is recorded as not done and "
                         "drained (default: 900, or 0.2 s per pod above 4,500 pods)")
    args = ap.parse_args()
    bench = prepared(args.nodes, (NS_JOB, NS_RUN, NS_ARGO))
    argo_crds(bench)
    argo_kc = argo_kubeconfig(bench)
    path = results_path("argo")
    # Smallest first, the single big runs last: a bench cut short still has the rest.
    plan = sorted([(1, n, args.reps) for n in args.fanout]
                  + ([(3, args.pipeline, args.reps)] if args.pipeline else []),
                  key=lambda p: p[0] * p[1]) + [(1, n, 1) for n in args.once]
    results = []
    for stages, n, reps in plan:
        results.append(one_shape(bench, stages, n, reps, args.sides, argo_kc,
                                 args.task_seconds, args.timeout))
        path.write_text(json.dumps({"argv": sys.argv, "nodes": args.nodes,
                                    "argo": testbed("paths").Layout.discover()
                                    .versions["ARGO_VERSION"], "results": results},
                                   indent=2))
    console.print(table(results, args.sides))
    console.print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
