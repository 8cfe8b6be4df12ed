"""The local cluster: real etcd, API server, controller-manager, scheduler, KWOK, Karpenter.

`up` starts each part by PID on free loopback ports and records them in
`.localcluster/state.json`; `down` stops exactly those PIDs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nightshift.api import conditions
from nightshift_localcluster import components, procs, realnode, tools
from nightshift_localcluster.components import Ports, Qps
from nightshift_localcluster.nodeconfig import NODE_NAME
from nightshift_localcluster.paths import Layout, LocalClusterError
from nightshift_localcluster.pki import Pki, write_kubeconfig

Say = Callable[[str], None]

DEFAULT_NODECLASS = """\
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata:
  name: default
  labels:
    app.kubernetes.io/managed-by: nightshift-localcluster
"""


@dataclass
class State:
    server: str
    ports: dict[str, int]
    processes: list[dict[str, Any]]
    qps: int
    started: float
    real_node: bool = False

    def proc_objs(self) -> list[procs.Proc]:
        return [procs.Proc(**p) for p in self.processes]


def _state_file(layout: Layout) -> Path:
    return layout.state / "state.json"


def load_state(layout: Layout) -> State | None:
    f = _state_file(layout)
    if not f.exists():
        return None
    return State(**json.loads(f.read_text()))


def save_state(layout: Layout, state: State) -> None:
    _state_file(layout).write_text(json.dumps(asdict(state), indent=2))


def running(layout: Layout) -> tuple[State | None, list[procs.Proc], list[procs.Proc]]:
    """The recorded state, the parts still alive and the parts that died."""
    state = load_state(layout)
    if state is None:
        return None, [], []
    objs = state.proc_objs()
    return state, [p for p in objs if procs.alive(p)], [p for p in objs if not procs.alive(p)]


def kubectl(layout: Layout, *args: str, input_: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [str(layout.kubectl), f"--kubeconfig={layout.kubeconfig}", *args],
        input=input_, capture_output=True, text=True, check=False,
    )
    if check and r.returncode != 0:
        raise LocalClusterError(f"kubectl {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def established_now(crd: Mapping[str, Any]) -> bool:
    """Whether a CRD's Established condition is True (a new one may have none yet)."""
    found = conditions.find((crd.get("status") or {}).get("conditions"), "Established")
    return found is not None and found.get("status") == "True"


def wait_established(layout: Layout, *crds: str, timeout: float = 60) -> None:
    """Wait until every named CRD is Established. Not `kubectl wait
    --for=condition=Established`: on a CRD created a moment before, whose status has no
    conditions yet, it fails at once (".status.conditions accessor error: <nil> is of
    the type <nil>") instead of waiting; a CI start-up failed on it."""
    pending = list(crds)

    def established() -> bool:
        r = kubectl(layout, "get", "crd", *pending, "-o", "json", check=False)
        if r.returncode != 0:
            return False
        doc = json.loads(r.stdout)
        # kubectl answers one name with the object itself, several with a List.
        for crd in doc["items"] if doc.get("kind") == "List" else [doc]:
            if established_now(crd):
                pending.remove(crd["metadata"]["name"])
        return not pending

    try:
        procs.wait_until("CRDs Established", established, timeout, interval=0.5)
    except LocalClusterError:
        raise LocalClusterError(f"CRDs not Established after {timeout:.0f} s: "
                                f"{', '.join(pending)}") from None


def check_mpi_health_port() -> None:
    """The MPI Operator serves its health check on a port compiled in (8080, on every
    address: cmd/mpi-operator/app/server.go). If something holds it, the operator would
    exit and be started again every 30 s, and the health wait below would pass on the
    other holder's answer. Refuse instead, naming the way out."""
    port = components.MPI_OPERATOR_HEALTH_PORT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))  # noqa: S104  (where the MPI Operator binds)
        except OSError as e:
            raise LocalClusterError(
                f"port {port} is taken ({e.strerror}), and the MPI Operator's health "
                f"check listens on it, fixed. Another local cluster's MPI Operator? Stop "
                f"what holds it (`ss -ltnp 'sport = :{port}'` names it), or start this "
                f"cluster without the MPI Operator: `nightshift-localcluster up "
                f"--no-mpi-operator` (MPI stages then stay pending)") from None


def up(layout: Layout, qps: Qps, say: Say, real_node: bool | None = None,
       profiling: bool = False, mpi_operator: bool = True, karpenter: bool = True) -> State:
    state, alive, dead = running(layout)
    if state is not None and alive and not dead:
        say(f"already up: {state.server} (kubeconfig {layout.kubeconfig})")
        return state
    if state is not None:
        say("a previous cluster is partly running; stopping it first")
        down(layout, say)

    tools.ensure(layout)
    if mpi_operator:
        check_mpi_health_port()
    layout.logs.mkdir(parents=True, exist_ok=True)
    # The real node's pods reach the API server at the bridge's gateway address.
    node = realnode.decide(layout, real_node, say)
    pki = Pki(layout.pki)
    pki.ensure(extra_ips=[node.gateway] if node else None)
    ports = Ports(*(procs.free_port() for _ in range(8)))
    server = f"https://127.0.0.1:{ports.apiserver}"
    write_kubeconfig(layout.kubeconfig, pki.kubeconfig("admin", server))
    for ident in ("controller-manager", "scheduler", "kwok", "karpenter", "mpi-operator",
                  "operator"):
        write_kubeconfig(layout.state / "kubeconfigs" / f"{ident}.yaml",
                         pki.kubeconfig(ident, server))

    started: list[procs.Proc] = []
    t0 = time.monotonic()

    def record() -> State:
        st = State(server=server, ports=asdict(ports), processes=[asdict(p) for p in started],
                   qps=qps.qps, started=time.time(), real_node=node is not None)
        save_state(layout, st)
        return st

    try:
        say("etcd")
        etcd = procs.start("etcd", components.etcd(layout, ports), layout.logs)
        started.append(etcd)
        record()
        procs.wait_until("etcd health", lambda: procs.http_ok(
            f"http://127.0.0.1:{ports.etcd_client}/health"), 30, etcd)

        say("kube-apiserver")
        if node is None:
            api_argv = components.apiserver(layout, pki, ports, profiling=profiling)
        else:
            api_argv = [*components.apiserver(layout, pki, ports, bind="0.0.0.0",  # noqa: S104  (the real node's kubelet reaches it at the gateway)
                                              advertise=node.gateway, profiling=profiling),
                        *realnode.apiserver_flags(pki, node)]
        api = procs.start("kube-apiserver", api_argv, layout.logs)
        started.append(api)
        record()
        admin = pki.token("admin")
        procs.wait_until("kube-apiserver /readyz", lambda: procs.http_ok(
            f"{server}/readyz", pki.ca_crt, admin), 90, api)

        say("kube-controller-manager, kube-scheduler, kwok")
        for name, argv in (
            ("kube-controller-manager", components.controller_manager(layout, pki, ports, qps)),
            ("kube-scheduler", components.scheduler(layout, ports, qps)),
            ("kwok", components.kwok(layout, ports)),
        ):
            started.append(procs.start(name, argv, layout.logs))
        record()

        say("Karpenter CRDs (core, EC2NodeClass, KWOKNodeClass) and the MPIJob CRD")
        for f in [*components.crd_files(layout), components.mpi_crd_file(layout)]:
            kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", str(f))
        wait_established(layout, "nodepools.karpenter.sh", "nodeclaims.karpenter.sh",
                         "kwoknodeclasses.karpenter.kwok.sh",
                         "ec2nodeclasses.karpenter.k8s.aws", "mpijobs.kubeflow.org")

        kp = None
        if karpenter:
            say("karpenter (KWOK provider, AWS instance catalog)")
            argv, env = components.karpenter(layout, ports)
            kp = procs.start("karpenter", argv, layout.logs, env)
            started.append(kp)
        mp = None
        if mpi_operator:
            say("mpi-operator (MPIJob v2beta1)")
            mp = procs.start("mpi-operator", components.mpi_operator(layout), layout.logs)
            started.append(mp)
        st = record()

        kcm, sched, kw = started[2], started[3], started[4]
        procs.wait_until("kube-controller-manager /healthz", lambda: procs.http_ok(
            f"https://127.0.0.1:{ports.controller_manager}/healthz"), 60, kcm)
        procs.wait_until("kube-scheduler /healthz", lambda: procs.http_ok(
            f"https://127.0.0.1:{ports.scheduler}/healthz"), 60, sched)
        procs.wait_until("kwok /healthz", lambda: procs.http_ok(
            f"http://127.0.0.1:{ports.kwok}/healthz"), 60, kw)
        if kp is not None:
            procs.wait_until("karpenter /readyz", lambda: procs.http_ok(
                f"http://127.0.0.1:{ports.karpenter_health}/readyz"), 90, kp)
        if mp is not None:
            procs.wait_until("mpi-operator /healthz", lambda: procs.http_ok(
                f"http://127.0.0.1:{components.MPI_OPERATOR_HEALTH_PORT}/healthz"), 60, mp)
        kubectl(layout, "apply", "--server-side", "-f", "-", input_=DEFAULT_NODECLASS)
        # The default service account appears asynchronously; tests create pods at once.
        procs.wait_until("the default service account", lambda: kubectl(
            layout, "get", "serviceaccount", "default", "-n", "default", check=False
        ).returncode == 0, 60)
        if node is not None:
            realnode.start(layout, pki, server, node, started, record, say)
            st = record()
    except BaseException:
        say("start-up failed; stopping what was started (logs kept in "
            f"{layout.logs})")
        if node is not None:
            realnode.stop(layout, started, False, say)
        for p in reversed(started):
            procs.stop(p)
        _state_file(layout).unlink(missing_ok=True)
        raise
    say(f"up in {time.monotonic() - t0:.1f}s: {server}")
    return st


def down(layout: Layout, say: Say) -> None:
    state = load_state(layout)
    if state is None:
        realnode.stop(layout, [], False, say)  # host changes of a killed `up`, if any
        say("not running (no state file)")
        return
    if state.real_node:
        api = [p for p in state.proc_objs() if p.name == "kube-apiserver"]
        realnode.stop(layout, state.proc_objs(), bool(api) and procs.alive(api[0]), say)
    for p in reversed(state.proc_objs()):
        if procs.alive(p):
            say(f"stopping {p.name} (pid {p.pid})")
        procs.stop(p)
    _state_file(layout).unlink(missing_ok=True)
    # A fresh etcd each `up`: tests and demos start from an empty cluster.
    subprocess.run(["rm", "-rf", str(layout.state / "etcd")], check=False)
    say("down")


def env_lines(layout: Layout) -> list[str]:
    # The catalog too, so `nightshift operator` started by hand from this shell prices
    # KWOK nodes as the tests' and the demo's operators do; and the real node's name, so
    # scripts that wait on it do not spell it themselves.
    return [
        f"export KUBECONFIG={layout.kubeconfig}",
        f"export PATH={layout.tools_bin}:$PATH",
        f"export NIGHTSHIFT_INSTANCE_CATALOG={layout.instance_types_file}",
        f"export NIGHTSHIFT_REAL_NODE_NAME={NODE_NAME}",
    ]
