"""`make demo`: a nightly-reduction pipeline on simulated EKS capacity, end to end.

Brings the local cluster up, installs the CRDs, installs the operator with Helm, applies
a VirtualCluster (a spot compute pool and a memory pool) and a two-stage PipelineRun
(one task per night, then a summary), shows progress, and ends with what Karpenter
launched and what it costs per hour. The cluster stays up for exploring with kubectl.

The operator is installed as users install it (charts/nightshift: its image, its own
ServiceAccount and RBAC) when the local cluster has its real node: the image is built
into the node first if it is not there (hack/images.sh, a few minutes the first time).
Without a real node (not root, not Linux) no container can run, so the operator runs
as a host process instead, and the demo says so. NIGHTSHIFT_DEMO_OPERATOR=process
chooses the host process anyway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from nightshift.api import names
from nightshift.kube import Kube
from nightshift.virtualcluster.catalog import parse_quantity
from nightshift_localcluster import cluster as lc
from nightshift_localcluster import helminstall
from nightshift_localcluster.components import Qps
from nightshift_localcluster.paths import Layout, LocalClusterError

console = Console()
NAMESPACE = "snfactory"
RELEASE, RELEASE_NAMESPACE = "nightshift", "nightshift"
NIGHTS = 300
# How long the kubelet may take to list a freshly imported image in its Node's status
# (hack/integration.sh waits as long).
IMAGE_LISTED_TIMEOUT = 120.0


def pipeline() -> dict[str, Any]:
    """The supernova factory's nightly shape: one task per night, then a summary."""
    task = {"pod-complete.stage.kwok.x-k8s.io/delay": "3s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "8s"}
    return {
        "apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
        "metadata": {"name": "nightly", "namespace": NAMESPACE},
        "spec": {
            "virtualCluster": "snfactory",
            "launch": {"maxPodsPerMinute": 600},
            "stages": [
                {"name": "ifu", "pool": "workers", "image": "busybox:1.36",
                 "forEach": {"range": {"from": 1, "to": NIGHTS, "format": "night-{:04d}"}},
                 "steps": [{"name": "reduce", "command": ["sh", "-c", 'echo "$NIGHTSHIFT_ITEM"']}],
                 "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                 "retries": {"perItem": 3}, "podAnnotations": task},
                {"name": "summary", "pool": "imaging", "dependsOn": ["ifu"],
                 "image": "busybox:1.36",
                 "steps": [{"name": "summarize", "command": ["echo", "summary"]}],
                 "resources": {"requests": {"cpu": "4", "memory": "64Gi"}},
                 "podAnnotations": task},
            ],
        },
    }


def main() -> int:
    try:
        return run()
    except LocalClusterError as e:
        console.print(f"[bold red]error[/]: {e}")
        return 1


def run() -> int:
    layout = Layout.discover()
    console.rule("[bold]Nightshift demo")
    lc.up(layout, Qps(), lambda m: console.print(f"  local cluster: {m}"))
    kube = Kube.from_env(str(layout.kubeconfig))
    for f in sorted((layout.root / "crds").glob("*.yaml")):
        lc.kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", str(f))
    lc.wait_established(layout, "pipelineruns.nightshift.io", "virtualclusters.nightshift.io")
    lc.kubectl(layout, "create", "namespace", NAMESPACE, check=False)
    # A fresh run each time: the demo is meant to be watched from the start.
    lc.kubectl(layout, "delete", "pipelinerun", "nightly", "-n", NAMESPACE,
               "--ignore-not-found", "--wait=true")

    op = start_operator(layout)
    started = time.monotonic()
    try:
        vc = yaml.safe_load((layout.root / "examples" / "virtualcluster-local.yaml").read_text())
        vc["metadata"]["namespace"] = NAMESPACE
        lc.kubectl(layout, "apply", "-f", "-", input_=yaml.safe_dump(vc))
        console.print("  VirtualCluster snfactory: pools [bold]workers[/] (compute, spot, "
                      "≤64 CPU) and [bold]imaging[/] (memory, spot-then-on-demand)")
        lc.kubectl(layout, "apply", "-f", "-", input_=yaml.safe_dump(pipeline()))
        console.print(f"  PipelineRun nightly: {NIGHTS} nights → summary\n")
        nodelog = NodeLog()
        run_obj = follow(kube, nodelog)
    finally:
        if op is not None:
            op.send_signal(signal.SIGTERM)
            try:
                op.wait(20)
            except subprocess.TimeoutExpired:
                op.kill()
    summarize(kube, run_obj, nodelog, time.monotonic() - started, layout, helm=op is None)
    return 0 if (run_obj.get("status") or {}).get("phase") == "Succeeded" else 1


def start_operator(layout: Layout) -> subprocess.Popen[bytes] | None:
    """The operator: a Helm release when it can be one (None returned), else a host
    process (returned, for the caller to stop)."""
    why = helm_problem(layout)
    if why is None:
        why = helm_install(layout)
        if why is None:
            return None
    log = layout.logs / "demo-operator.log"
    console.print(f"  operator: [bold yellow]not installed with Helm[/] ({why}); running it "
                  "as a host process instead, with the test bed's operator kubeconfig")
    # An earlier demo's release would reconcile the same namespace: one operator only.
    gone = helminstall.helm(str(layout.helm), str(layout.kubeconfig), "uninstall", RELEASE,
                            "-n", RELEASE_NAMESPACE, "--wait")
    if gone.returncode == 0:
        console.print(f"  operator: uninstalled the earlier Helm release {RELEASE}")
    env = {**os.environ, **layout.operator_env()}
    with log.open("ab") as out:
        op = subprocess.Popen([sys.executable, "-m", "nightshift.cli.main", "operator",
                               "--health-port", "0", "--namespace", NAMESPACE],
                              stdout=out, stderr=subprocess.STDOUT, env=env)
    console.print(f"  operator: host process pid {op.pid}, log {log}")
    return op


def helm_problem(layout: Layout) -> str | None:
    """Why the operator cannot be a Helm release here. Builds its image from this
    checkout first: seconds when nothing changed (docker's cache; the node keeps what
    it has), so the demo never installs the operator of older code."""
    if os.environ.get("NIGHTSHIFT_DEMO_OPERATOR") == "process":
        return "NIGHTSHIFT_DEMO_OPERATOR=process"
    kubectl = [str(layout.kubectl), f"--kubeconfig={layout.kubeconfig}"]
    node = helminstall.real_node(kubectl)
    why = helminstall.real_node_problem(node)
    if node is None or (why is not None and "make images" not in why):
        return why
    console.print("  operator image: building nightshift-operator:dev into the real node "
                  "(hack/images.sh build .; seconds when unchanged, a few minutes the "
                  "first time)")
    r = subprocess.run(["bash", str(layout.root / "hack" / "images.sh"), "build",
                        str(layout.root)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return f"building the operator image failed: {(r.stderr or r.stdout).strip()[-600:]}"
    if why is None:
        return None  # listed before: the name stays, now on this checkout's build
    # The image is in the node's containerd now, but the kubelet lists it in the Node's
    # status only at its next status update (seconds, at most a minute or two): without
    # this wait a fresh clone's demo always fell back to the host process.
    deadline = time.monotonic() + IMAGE_LISTED_TIMEOUT
    with console.status("  operator image: waiting for the real node to list it"):
        while True:
            why = helminstall.real_node_problem(helminstall.real_node(kubectl))
            if why is None or time.monotonic() > deadline:
                return why
            time.sleep(2)


def helm_install(layout: Layout) -> str | None:
    """helm upgrade --install of charts/nightshift watching the demo's namespace; why
    not, when it failed."""
    image_id = helminstall.imported_image_id(layout.state)
    values = helminstall.local_values(
        watch_namespaces=[NAMESPACE], catalog=layout.instance_types_file,
        extra={"podAnnotations": {helminstall.IMAGE_ID_ANNOTATION: image_id}}
        if image_id else None)
    console.print(f"  operator: helm upgrade --install {RELEASE} charts/nightshift -n "
                  f"{RELEASE_NAMESPACE} (image nightshift-operator:dev on the real node)")
    r = helminstall.upgrade_install(str(layout.helm), str(layout.kubeconfig),
                                    layout.root / "charts" / "nightshift", RELEASE,
                                    RELEASE_NAMESPACE, values)
    if r.returncode != 0:
        return f"helm install failed: {r.stderr.strip()[-600:]}"
    pods = lc.kubectl(layout, "get", "pods", "-n", RELEASE_NAMESPACE, "-l",
                      f"app.kubernetes.io/instance={RELEASE}", "-o",
                      "jsonpath={.items[*].metadata.name}").stdout.split()
    console.print(f"  operator: pod {', '.join(pods)} as ServiceAccount {RELEASE} "
                  "(the chart's RBAC, nothing more)")
    return None


class NodeLog:
    """Every node the VirtualCluster had during the run, with when it was seen."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}

    def observe(self, nodes: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        for n in nodes:
            lab = n["metadata"].get("labels") or {}
            rec = self.seen.setdefault(n["metadata"]["name"], {
                "pool": lab.get(names.LABEL_POOL, "-"),
                "type": lab.get("node.kubernetes.io/instance-type", "?"),
                "capacity": lab.get("karpenter.sh/capacity-type", "?"),
                # Allocatable, not capacity: Karpenter's KWOK provider sets a node's
                # capacity to the requests that launched it, its allocatable to the type's.
                "cpu": _cpus((n.get("status") or {}).get("allocatable", {}).get("cpu")),
                "price": float(lab.get("eks-node-viewer/instance-price") or 0),
                "first": now})
            rec["last"] = now


def _cpus(quantity: str | None) -> str:
    if not quantity:
        return "?"
    try:
        return f"{parse_quantity(quantity):g}"
    except ValueError:
        return quantity


def follow(kube: Kube, nodelog: NodeLog, timeout: float = 900) -> dict[str, Any]:
    cols = (TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"), TimeElapsedColumn())
    with Progress(*cols, console=console) as bar:
        tasks: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = kube.get(names.API_VERSION, names.PIPELINERUN, "nightly", NAMESPACE) or {}
            status = run.get("status") or {}
            nodes = kube.list("v1", "Node",
                              label_selector=f"{names.LABEL_VIRTUAL_CLUSTER}=snfactory")
            nodelog.observe(nodes)
            for st in status.get("stages") or []:
                if st["name"] not in tasks:
                    tasks[st["name"]] = bar.add_task(st["name"], total=st.get("total") or 1,
                                                     note="")
                note = f"{st.get('running', 0)} running"
                if st.get("failed"):
                    note += f", [red]{st['failed']} failed[/]"
                note += f", {len(nodes)} nodes"
                bar.update(tasks[st["name"]], total=st.get("total") or 1,
                           completed=st.get("succeeded", 0), note=note)
            if status.get("phase") in ("Succeeded", "Failed", "Cancelled"):
                return run
            time.sleep(1)
    raise LocalClusterError(f"the demo run did not finish in {timeout:.0f}s; see "
                            "kubectl get nsrun -n snfactory -o yaml")


def summarize(kube: Kube, run: dict[str, Any], nodelog: NodeLog, seconds: float,
              layout: Layout, *, helm: bool) -> None:
    status = run.get("status") or {}
    console.print(f"\nrun [bold]{status.get('phase')}[/]: {status.get('progress')} items in "
                  f"{seconds:.0f}s; stages: " + ", ".join(
                      f"{s['name']} {s.get('succeeded', 0)}/{s.get('total', 0)}"
                      for s in status.get("stages") or []))
    table = Table(title="Nodes Karpenter launched for the run (KWOK nodes of real EC2 "
                  "types, catalog prices)")
    for col in ("pool", "instance type", "capacity", "CPU", "$/hour", "seen for", "cost $"):
        table.add_column(col, justify="left" if col in ("pool", "instance type", "capacity")
                         else "right")
    total_hourly = total_cost = 0.0
    for rec in sorted(nodelog.seen.values(), key=lambda r: (r["pool"], r["first"])):
        lifetime = rec["last"] - rec["first"]
        cost = rec["price"] * lifetime / 3600
        total_hourly += rec["price"]
        total_cost += cost
        table.add_row(rec["pool"], rec["type"], rec["capacity"], rec["cpu"],
                      f"{rec['price']:.4f}", f"{lifetime:.0f}s", f"{cost:.5f}")
    console.print(table)
    console.print(f"{len(nodelog.seen)} nodes, ${total_hourly:.4f}/h together; this run's "
                  f"node time cost about [bold]${total_cost:.4f}[/] (Karpenter removes "
                  "empty nodes after the pool's consolidateAfter)")
    vc = kube.get(names.API_VERSION, names.VIRTUALCLUSTER, "snfactory", NAMESPACE) or {}
    for cond in (vc.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            console.print(f"VirtualCluster Ready={cond['status']}: {cond.get('message', '')}")
    kc = Path(layout.kubeconfig)
    console.print(f"\nexplore: export KUBECONFIG={kc}; kubectl get nsrun,nsvc,jobs -n {NAMESPACE}; "
                  f"kubectl nightshift status nightly -n {NAMESPACE} (.venv/bin on PATH)")
    if helm:
        console.print(f"the operator stays installed (helm list -n {RELEASE_NAMESPACE}); "
                      f"remove it: helm uninstall {RELEASE} -n {RELEASE_NAMESPACE}")
    console.print("stop the local cluster: make cluster-down")


if __name__ == "__main__":
    sys.exit(main())
