"""`nightshift-localcluster up|down|status|env|build|restart`: the local cluster."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from nightshift_localcluster import cluster, faults, procs, tools
from nightshift_localcluster.components import Qps
from nightshift_localcluster.paths import Layout, LocalClusterError

console = Console(stderr=True)


def _say(msg: str) -> None:
    console.print(f"[bold cyan]localcluster[/]: {msg}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="nightshift-localcluster",
        description="A local Kubernetes control plane with KWOK nodes and Karpenter's KWOK "
        "provider (simulated EKS capacity with real EC2 instance types and prices).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="build what is missing, start the cluster, wait until ready")
    p_up.add_argument("--default-qps", action="store_true",
                      help="keep the controller-manager's and scheduler's upstream client QPS "
                      "(20/30) instead of the raised 300/600")
    p_up.add_argument("--real-node", action=argparse.BooleanOptionalAction, default=None,
                      help="one real worker node (containerd + kubelet) beside the KWOK ones; "
                      "default: on where the machine allows it (root, cgroups, bridge, "
                      "iptables), or NIGHTSHIFT_REAL_NODE=1/0")
    p_up.add_argument("--profiling", action="store_true",
                      help="serve the API server's /debug/pprof (a bench's CPU profile: "
                      "`kubectl get --raw '/debug/pprof/profile?seconds=30'`); off by default")
    p_up.add_argument("--mpi-operator", action=argparse.BooleanOptionalAction, default=True,
                      help="the Kubeflow MPI Operator, for MPI stages (default on). Its health "
                      "port is fixed at 8080, so only one can run on a machine: "
                      "bench/twin.py starts both twins without it")
    p_up.add_argument("--karpenter", action=argparse.BooleanOptionalAction, default=True,
                      help="Karpenter with its KWOK provider, which makes nodes for "
                      "VirtualClusters' NodePools (default on). Without it the CRDs are "
                      "still installed but nothing provisions nodes: bench/twin.py's "
                      "twins bring their own fake nodes and start without it")
    sub.add_parser("down", help="stop exactly the processes `up` started")
    sub.add_parser("status", help="show each part, its PID and whether it is alive")
    sub.add_parser("env", help="print shell exports: eval \"$(nightshift-localcluster env)\"")
    sub.add_parser("build", help="build or fetch the upstream binaries only")
    p_rs = sub.add_parser("restart", help="fault drill: stop one part (kube-apiserver, etcd, "
                          "karpenter, ...), keep it down, start it again")
    p_rs.add_argument("part", help="a name `status` lists")
    p_rs.add_argument("--down-for", type=float, default=0.0, metavar="SECONDS",
                      help="how long it stays down, counted from the signal (default 0)")
    p_rs.add_argument("--kill", action="store_true", help="SIGKILL instead of SIGTERM")
    p_rs.add_argument("--revive-for", type=float, default=30.0, metavar="SECONDS",
                      help="afterwards, start again any other part that exits (default 30)")
    args = ap.parse_args(argv)

    try:
        layout = Layout.discover()
        if args.cmd == "up":
            cluster.up(layout, Qps.upstream_defaults() if args.default_qps else Qps(), _say,
                       real_node=args.real_node, profiling=args.profiling,
                       mpi_operator=args.mpi_operator, karpenter=args.karpenter)
            console.print(f"kubeconfig: {layout.kubeconfig}\n"
                          f"try: eval \"$(nightshift-localcluster env)\" && kubectl get nodes")
        elif args.cmd == "down":
            cluster.down(layout, _say)
        elif args.cmd == "status":
            return _status(layout)
        elif args.cmd == "env":
            print("\n".join(cluster.env_lines(layout)))
        elif args.cmd == "restart":
            faults.restart(layout, args.part, args.down_for, args.kill, _say, args.revive_for)
        elif args.cmd == "build":
            tools.ensure(layout)
            _say("all upstream binaries present")
    except LocalClusterError as e:
        console.print(f"[bold red]error[/]: {e}")
        return 1
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130
    return 0


def _status(layout: Layout) -> int:
    state, _alive, dead = cluster.running(layout)
    if state is None:
        console.print("not running")
        return 3
    console.print(f"server {state.server}, kubeconfig {layout.kubeconfig}, qps {state.qps}")
    for p in state.proc_objs():
        ok = procs.alive(p)
        mark = "[green]running[/]" if ok else "[red]dead[/]"
        console.print(f"  {p.name:<24} pid {p.pid:<8} {mark}  log {p.log}")
    return 0 if not dead else 1


if __name__ == "__main__":
    sys.exit(main())
