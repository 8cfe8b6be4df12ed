"""What the KWOK fan-out benches share: the cluster, one timed run, the drain between runs.

bench/ablation.py and bench/fanout.py both time Indexed Jobs on the local cluster's KWOK
nodes; the Jobs come from bench/jobvariants.py.

A run is timed from just before the Job's create call to the first poll (every 0.25 s)
that sees its Complete condition; the API server's audit log gives when the last pod
was created and bound. Between runs the namespace is drained: Jobs and pods deleted,
then a wait until no pod is left and the controller-manager, scheduler, KWOK and the API
server are idle again, so a run never pays for the previous one's clean-up.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml
from auditlog import Audit, foreign_writes, pod_work, pod_writes
from hostspeed import HostSpeed, cpu_seconds_by_state
from profiles import Beside, Window, note_window_work, profiles_for
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from nightshift.api import names
from nightshift.kube import Kube, KubeError

# Wide enough for a result line per run when the output goes to a file or a pipe.
console = Console(width=None if sys.stdout.isatty() else 160)
POOL = "bench"
# The local cluster's parts whose CPU a drain waits to settle (names in state.json).
QUIET_PARTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "etcd")


def testbed(module: str) -> Any:
    """A module of the local cluster's package, wherever the test bed lives now."""
    for base in ("nightshift_localcluster", "nightshift.localcluster"):
        try:
            return importlib.import_module(f"{base}.{module}")
        except ImportError:
            continue
    raise RuntimeError("neither nightshift_localcluster nor nightshift.localcluster imports: "
                       "install the test bed (make venv)")


def layout() -> Any:
    return testbed("paths").Layout.discover()


def nodes(count: int) -> list[dict[str, Any]]:
    """Fake nodes of the bench pool: tainted like a Nightshift pool, room for 5,000 pods."""
    out = []
    for i in range(count):
        name = f"kwok-bench-{i}"
        out.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {names.LABEL_POOL: POOL, "kubernetes.io/hostname": name,
                                    "type": "kwok"}},
            "spec": {"taints": [{"key": names.TAINT_POOL, "value": POOL,
                                 "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "5000"},
                       "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "5000"}},
        })
    return out


# -- the cluster -----------------------------------------------------------------------

def part_pids(state_dir: Path) -> dict[str, int]:
    """Each part of the local cluster whose state directory this is, and its PID."""
    state = json.loads((state_dir / "state.json").read_text())
    return {p["name"]: int(p["pid"]) for p in state["processes"]}


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat)."""
    states = cpu_seconds_by_state()
    return sum(states[:8]) - states[3] - states[4]  # less idle and iowait


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


class Bench:
    """The local cluster as the benches use it: API client, audit log, part PIDs."""

    audited = True  # the API server's audit log is readable (not on --any-cluster)

    def __init__(self) -> None:
        self.layout = layout()
        self.kube = Kube.from_env(str(self.layout.kubeconfig))
        self.audit = Audit(self.layout.logs / "audit.log")
        self.pids = part_pids(self.layout.state)
        self.nice = 0  # the cluster's parts' nice value, as renice() last set it
        self.profile: Window | None = None  # --profile: CPU profiles in every run
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    def beside(self, label: str) -> Beside:
        """What runs beside a timed run: the host-speed probe at the cluster's nice value
        (so it gets its turns) and, with --profile, the parts' CPU profiles."""
        prof = None
        if self.profile is not None:
            slug = "-".join(label.replace("/", "of").split())
            prof = profiles_for(self.layout, self.profile,
                                results_path("prof", stamp=f"{self.stamp}-{slug}").with_suffix(""))
        return Beside(HostSpeed(self.nice), prof)

    def renice(self, nice: int, pids: list[int] | None = None) -> None:
        """Every thread of the cluster's parts (or of `pids`) to this nice value.

        On a machine shared with other work, a negative value keeps others' builds and
        tests from showing up as the cluster's time; 0 puts things back.
        """
        if pids is None:
            self.nice = nice  # the host-speed probe runs at the cluster's value
        for pid in pids if pids is not None else list(self.pids.values()):
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
                except OSError:
                    continue  # a thread that just ended

    def log(self, namespace: str, pod: str) -> str:
        r = subprocess.run([str(self.layout.kubectl), f"--kubeconfig={self.layout.kubeconfig}",
                            "logs", "-n", namespace, pod], capture_output=True, text=True,
                           check=True)
        return r.stdout

    def cpu(self) -> dict[str, float]:
        out = {n: cpu_seconds(p) for n, p in self.pids.items()}
        out["machine"] = machine_busy_seconds()
        return out

    def cpu_since(self, before: dict[str, float]) -> dict[str, float]:
        """CPU seconds per part since `before`; "other" is everything else on the machine
        (other agents' builds and tests, this bench's own polling)."""
        now = self.cpu()
        out = {n: round(now[n] - before.get(n, 0.0), 1) for n in now if n != "machine"}
        out["other"] = round(now["machine"] - before["machine"] - sum(out.values()), 1)
        return out

    def server_version(self) -> str:
        """The API server's release (a bed may run another: NIGHTSHIFT_KUBERNETES_VERSION)."""
        return str(self.kube._call("GET", "/version").get("gitVersion", "?"))

    def ensure_nodes(self, count: int) -> None:
        for node in nodes(count):
            self.kube.apply(node)
            self.kube.apply({"apiVersion": "v1", "kind": "Node",
                             "metadata": {"name": node["metadata"]["name"]},
                             "status": node["status"]}, subresource="status")

    def ensure_configmap(self, cm: dict[str, Any]) -> None:
        """The items ConfigMap as given: they are immutable, so a stale one is replaced."""
        meta = cm["metadata"]
        old = self.kube.get("v1", "ConfigMap", meta["name"], meta["namespace"])
        if old is not None and old.get("data") == cm.get("data"):
            return
        if old is not None:
            self.kube.delete("v1", "ConfigMap", meta["name"], meta["namespace"])
        self.create(cm)

    def ensure_namespace(self, ns: str) -> None:
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = self.kube.path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return self.kube._call("POST", path, obj)

    def delete_all(self, api_version: str, kind: str, namespace: str,
                   propagation: str = "Background") -> None:
        try:
            self.kube._call("DELETE", self.kube.path(api_version, kind, namespace),
                            {"apiVersion": "v1", "kind": "DeleteOptions",
                             "gracePeriodSeconds": 0, "propagationPolicy": propagation})
        except KubeError as e:
            # A loaded API server answers a big deletecollection with 504 while it goes
            # on deleting; drain() polls and deletes again until nothing is left. Or it
            # drops the connection at its request timeout (seen after Argo's 10,000
            # pods; status 0): the same, the deletion goes on and drain() polls.
            if e.status not in (0, 500, 504):
                raise
            if e.status == 0:
                console.print(f"  [yellow]deleting every {kind} in {namespace}: "
                              f"{e.message}; polling until they are gone[/]")

    def count(self, api_version: str, kind: str, namespace: str) -> int:
        out = self.kube._call("GET", self.kube.path(api_version, kind, namespace),
                              query=[("limit", 1)],
                              accept="application/json;as=PartialObjectMetadataList;"
                                     "g=meta.k8s.io;v=v1,application/json")
        rest = int((out.get("metadata") or {}).get("remainingItemCount") or 0)
        return len(out.get("items") or []) + rest

    def quiet(self, threshold: float = 0.15, settle: int = 2, timeout: float = 120) -> float:
        """Wait until each control-plane part uses < threshold of a core for `settle`
        consecutive seconds, or `timeout` (others' tests may keep the API server busy);
        returns the seconds waited. 120 s: after 10,000 pod deletions KWOK and the API
        server work for well over 30 s, and a run started then pays for them."""
        t0 = time.monotonic()
        pids = {n: p for n, p in self.pids.items() if n in QUIET_PARTS}
        calm = 0
        last = {n: cpu_seconds(p) for n, p in pids.items()}
        while time.monotonic() - t0 < timeout:
            time.sleep(1)
            now = {n: cpu_seconds(p) for n, p in pids.items()}
            busy = max(now[n] - last[n] for n in pids) if pids else 0.0
            last = now
            calm = calm + 1 if busy < threshold else 0
            if calm >= settle:
                break
        else:
            console.print(f"  [yellow]the control plane was still busy after {timeout:.0f} s "
                          "of waiting; the next run starts anyway[/]")
        return time.monotonic() - t0

    def drain(self, namespace: str, owner: tuple[str, str, str] | None = None) -> float:
        """No Job, pod or event left in namespace and the control plane idle; seconds.
        `owner` (api version, kind, name): the object whose Jobs or pods these are (a
        PipelineRun, a Workflow), deleted and gone first; the rest go by owner."""
        t0 = time.monotonic()
        if owner:
            api, kind, name = owner
            # Pods first (one call), then the owner.
            self.delete_all("v1", "Pod", namespace)
            self.kube.delete(api, kind, name, namespace)
            deadline = time.monotonic() + 120
            while self.kube.get(api, kind, name, namespace):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} {name} is still there 120 s after its delete")
                time.sleep(0.5)
        # Pods first: deleting a Job first would make the garbage collector patch or
        # delete each of its pods one call at a time.
        self.delete_all("v1", "Pod", namespace)
        self.delete_all("batch/v1", "Job", namespace)
        deadline = time.monotonic() + 300
        while self.count("v1", "Pod", namespace) or self.count("batch/v1", "Job", namespace):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{namespace}: pods or Jobs still there after 300 s")
            # Pods whose finalizer the Job controller had not yet dropped go only now.
            self.delete_all("v1", "Pod", namespace)
            time.sleep(1)
        self.delete_all("v1", "Event", namespace)
        self.quiet()
        return time.monotonic() - t0


def prepared(nodes: int, namespaces: Sequence[str], renice: int = 0) -> Bench:
    """The bench on the local cluster: Nightshift's CRDs applied, `nodes` KWOK nodes of
    the bench pool, the namespaces; with `renice`, the cluster's parts at that nice
    value until the bench exits."""
    bench = Bench()
    if renice:
        bench.renice(renice)
        atexit.register(bench.renice, 0)
    for f in sorted((ROOT / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                bench.kube.apply(doc)
    bench.ensure_nodes(nodes)
    for ns in namespaces:
        bench.ensure_namespace(ns)
    return bench


def results_path(name: str, directory: Path | None = None, stamp: str | None = None) -> Path:
    """<directory>/<name>-<time>.json, bench/results by default (made if missing)."""
    out = directory or ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    return out / f"{name}-{stamp or time.strftime('%Y%m%d-%H%M%S')}.json"


@dataclass
class Timed:
    done_s: float
    completion_s: float | None  # status.completionTime - creationTimestamp (1 s steps)
    last_create_s: float | None
    last_bind_s: float | None
    load_start: float
    load_end: float
    pod_bytes: int
    # CPU seconds each local-cluster part used during the run: where the time went.
    cpu: dict[str, float] = field(default_factory=dict)
    foreign_writes: int = 0
    pod_work: dict[str, int] = field(default_factory=dict)
    # The host's speed meanwhile (bench/hostspeed.py): chunk_ms, samples, steal_s.
    host: dict[str, Any] = field(default_factory=dict)


def print_parts(t: Timed) -> None:
    """A run's CPU seconds per part and its pod writes, under its result line (what
    the bench could see: none of it on --any-cluster)."""
    if t.cpu:
        console.print("      cpu s: " + "  ".join(f"{k} {v}" for k, v in t.cpu.items()))
    if t.host:
        console.print(f"      host: chunk {t.host['chunk_ms']} ms (median of "
                      f"{t.host['samples']}), steal {t.host['steal_s']} s")
    if t.pod_work:
        console.print("      pod writes: " + "  ".join(f"{k} {v}" for k, v in t.pod_work.items()))


@contextmanager
def progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    with Progress(TextColumn(f"  {label}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


def job_state(job: dict[str, Any] | None) -> tuple[int, str | None]:
    status = (job or {}).get("status") or {}
    conds = [c["type"] for c in status.get("conditions") or []
             if c["type"] in ("Complete", "Failed") and c["status"] == "True"]
    return int(status.get("succeeded") or 0), (conds[0] if conds else None)


def k8s_time(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def sample_pod_bytes(bench: Bench, namespace: str) -> int:
    pods = bench.kube.list("v1", "Pod", namespace, limit=1)
    return len(json.dumps(pods[0], separators=(",", ":"))) if pods else 0


def run_job(bench: Bench, job: dict[str, Any], cms: list[dict[str, Any]], label: str,
            timeout: float) -> Timed:
    """Create the Job (its items ConfigMaps first if missing), time it to Complete."""
    ns = job["metadata"]["namespace"]
    n = int(job["spec"]["completions"])
    for cm in cms:
        bench.ensure_configmap(cm)
    load_start = loadavg()
    mark = bench.audit.mark()
    cpu0 = bench.cpu()
    with bench.beside(label) as beside:
        t0 = time.time()
        bench.create(job)
        name = job["metadata"]["name"]
        pod_bytes = 0
        with progress(label, n) as update:
            while True:
                current = bench.kube.get("batch/v1", "Job", name, ns)
                done, cond = job_state(current)
                update(done)
                if cond:
                    t_done = time.time()
                    break
                if time.time() - t0 > timeout:
                    raise RuntimeError(f"{label}: not done after {timeout:.0f} s ({done}/{n})")
                if not pod_bytes and done:
                    pod_bytes = sample_pod_bytes(bench, ns)
                time.sleep(0.25)
        if cond != "Complete":
            raise RuntimeError(f"{label}: the Job ended {cond}, not Complete")
        status = (current or {}).get("status") or {}
        completion = None
        if status.get("completionTime"):
            completion = k8s_time(status["completionTime"]) - k8s_time(
                current["metadata"]["creationTimestamp"])  # type: ignore[index]
        host = beside.finish()
    cpu = bench.cpu_since(cpu0)
    entries = bench.audit.since(mark)
    creates = pod_writes(entries, ns, None)
    binds = pod_writes(entries, ns, "binding")
    note_window_work(host, entries, ns, t0)
    return Timed(done_s=round(t_done - t0, 2), cpu=cpu,
                 foreign_writes=foreign_writes(entries, (ns,)),
                 pod_work=pod_work(entries, ns), completion_s=completion,
                 last_create_s=round(creates[-1] - t0, 2) if creates else None,
                 last_bind_s=round(binds[-1] - t0, 2) if binds else None,
                 load_start=load_start, load_end=loadavg(), pod_bytes=pod_bytes, host=host)


def stats(values: list[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)
