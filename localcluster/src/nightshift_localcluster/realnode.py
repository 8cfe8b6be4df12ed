"""One real worker node beside the KWOK ones: containerd + runc + CNI bridge, kubelet,
kube-proxy and a small cluster DNS, all started by PID; host changes journaled and
undone on `down` (hostchanges.py).

`decide` says whether this machine can have one (and why not, when it cannot); `up` in
cluster.py then binds the API server where pods reach it (the bridge's gateway address)
and calls `start`; `down` calls `stop` before stopping the control plane.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from nightshift_localcluster import hostchanges, nodeconfig, pause, procs
from nightshift_localcluster.dns import host_resolvers
from nightshift_localcluster.hostchanges import Journal
from nightshift_localcluster.nodeconfig import NODE_NAME, NodePlan
from nightshift_localcluster.paths import Layout, LocalClusterError
from nightshift_localcluster.pki import Pki, _openssl, write_kubeconfig

Say = Callable[[str], None]
ENV = "NIGHTSHIFT_REAL_NODE"
PROCS = ("containerd", "cluster-dns", "kubelet", "kube-proxy")
EXECUTABLES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip")
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
DNS_RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "nightshift:local-dns"}
rules:
- {apiGroups: [""], resources: [services], verbs: [get]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "nightshift:local-dns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "nightshift:local-dns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: nightshift-dns}
"""


def wanted(flag: bool | None) -> bool | None:
    """--real-node/--no-real-node, else NIGHTSHIFT_REAL_NODE=1/0, else None (automatic)."""
    if flag is not None:
        return flag
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    return None


def decide(layout: Layout, flag: bool | None, say: Say) -> NodePlan | None:
    want = wanted(flag)
    if want is False:
        say("real node: off (--no-real-node or NIGHTSHIFT_REAL_NODE=0); KWOK nodes only")
        return None
    reasons = problems(layout, install=True, say=say)
    if reasons:
        text = "; ".join(reasons)
        if want:
            raise LocalClusterError(f"a real node was asked for, but this machine cannot run "
                                    f"one: {text}. Start without it: --no-real-node")
        say(f"real node: not on this machine ({text}); KWOK nodes only")
        return None
    return plan(layout, say)


def problems(layout: Layout, install: bool = False, say: Say | None = None) -> list[str]:
    """Why this machine cannot run the real node (empty: it can)."""
    if sys.platform != "linux":
        return ["it needs Linux"]
    if os.geteuid() != 0:
        return ["it needs root (containerd, runc and the kubelet manage namespaces, cgroups "
                "and mounts); run `up` as root or pass --no-real-node"]
    if install and _missing_tools() and shutil.which("apt-get"):
        if say:
            say("real node: installing containerd, runc, CNI plugins, iptables "
                "(hack/realnode-deps.sh)")
        subprocess.run(["bash", str(layout.root / "hack" / "realnode-deps.sh")], check=False)
    out = []
    gaps = _missing_tools()
    if gaps:
        out.append(f"missing {', '.join(gaps)} (Debian: bash hack/realnode-deps.sh)")
    for name in ("kubelet", "kube-proxy"):
        if not layout.bin("kubernetes", name).exists():
            out.append(f"no {layout.bin('kubernetes', name)} (make upstream)")
    if "overlay" not in Path("/proc/filesystems").read_text():
        out.append("the kernel has no overlay filesystem (containerd's snapshotter)")
    cg = _cgroup_probe()
    if cg:
        out.append(cg)
    if not Path("/sys/class/net", nodeconfig.BRIDGE).exists():
        probe = f"nsprobe{os.getpid() % 10000}"
        r = hostchanges.run("ip", "link", "add", probe, "type", "bridge")
        if r.returncode != 0:
            out.append(f"cannot create a network bridge: {r.stderr.strip()}")
        else:
            hostchanges.run("ip", "link", "del", probe)
    if shutil.which("iptables"):
        r = hostchanges.run("iptables", "-t", "nat", "-S")
        if r.returncode != 0:
            out.append(f"iptables does not work here: {r.stderr.strip()}")
    if _free_subnet() is None:
        out.append(f"every candidate pod subnet ({', '.join(nodeconfig.POD_SUBNETS)}) is "
                   "already routed on this machine")
    return out


def _missing_tools() -> list[str]:
    gaps = [e for e in EXECUTABLES if shutil.which(e) is None]
    gaps += [f"CNI plugin {p}" for p in CNI_PLUGINS if not (nodeconfig.CNI_BIN_DIR / p).exists()]
    if not (shutil.which("gcc") or shutil.which("cc")):
        gaps.append("gcc")
    return gaps


def _cgroup_probe() -> str | None:
    root = hostchanges.CGROUP_ROOT
    base = root / "memory" if (root / "memory").is_dir() else root
    probe = base / f"nightshift-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"cgroups are not writable ({base}: {e.strerror})"
    return None


def _free_subnet() -> str | None:
    r = hostchanges.run("ip", "-4", "route", "show")
    routed = []
    for line in r.stdout.splitlines():
        dst = line.split()[0] if line.split() else ""
        if "/" in dst and "dev " + nodeconfig.BRIDGE not in line:
            routed.append(ipaddress.ip_network(dst, strict=False))
    for cand in nodeconfig.POD_SUBNETS:
        net = ipaddress.ip_network(cand)
        if not any(net.overlaps(o) for o in routed if o.prefixlen > 0):
            return cand
    return None


def plan(layout: Layout, say: Say | None = None) -> NodePlan:
    subnet = _free_subnet()
    assert subnet is not None  # noqa: S101  (invariant for mypy: problems() checked)
    return NodePlan(dir=layout.state / "realnode", subnet=subnet,
                    kubelet_port=procs.free_port(), kubelet_healthz_port=procs.free_port(),
                    proxy_healthz_port=procs.free_port(), proxy_metrics_port=procs.free_port(),
                    shared_root=shared_root(layout, say))


# Beside the shared root: "<PID>\n<state dir>" of the containerd that `up` started on it.
SHARED_OWNER = "owner"


def shared_root(layout: Layout, say: Say | None = None) -> Path | None:
    """containerd's root in the build cache, so a fresh clone's node starts with the
    images an earlier checkout imported and hack/images.sh imports only what changed
    (a fresh clone imported all six, about 1 GB, in 64 s). None (this checkout's own
    root) while another checkout's containerd holds it: two containerds must not share
    one metadata database. The holder is the PID its `up` recorded (SHARED_OWNER)."""
    root = layout.cache / "realnode" / "containerd" / "root"
    owner = root.parent / SHARED_OWNER
    try:
        pid_text, state = owner.read_text().split("\n", 1)
        pid = int(pid_text)
    except (OSError, ValueError):
        return root
    if state.strip() == str(layout.state) or not _is_containerd(pid):
        return root
    if say:
        say(f"real node: containerd {pid} of {state.strip()} holds {root}; this node "
            "keeps its own root (its images are imported afresh)")
    return None


def _is_containerd(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return argv0.endswith(b"containerd")


def apiserver_flags(pki: Pki, node: NodePlan) -> list[str]:
    """Extra API server flags: a client certificate for the kubelet's API, and reach the
    node by its InternalIP (its hostname resolves nowhere)."""
    crt, key = pki.dir / "apiserver-kubelet-client.crt", pki.dir / "apiserver-kubelet-client.key"
    if not crt.exists():
        csr = pki.dir / "apiserver-kubelet-client.csr"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj",
                 "/O=system:masters/CN=kube-apiserver-kubelet-client",
                 "-keyout", str(key), "-out", str(csr))
        ext = pki.dir / "apiserver-kubelet-client.ext"
        ext.write_text("extendedKeyUsage=clientAuth\n")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki.ca_crt), "-CAkey",
                 str(pki.ca_key), "-CAcreateserial", "-days", "3650", "-extfile", str(ext),
                 "-out", str(crt))
    return [f"--kubelet-client-certificate={crt}", f"--kubelet-client-key={key}",
            "--kubelet-preferred-address-types=InternalIP,Hostname"]


def _kubectl(layout: Layout, *args: str, input_: str | None = None) -> str:
    r = subprocess.run([str(layout.kubectl), f"--kubeconfig={layout.kubeconfig}", *args],
                       input=input_, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise LocalClusterError(f"kubectl {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def ctr(node: NodePlan, *args: str, stdin: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    with open(stdin or os.devnull, "rb") as f:
        r = subprocess.run(["ctr", "--address", str(node.containerd_sock), "-n", "k8s.io", *args],
                           stdin=f, capture_output=True, check=False)
    out = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(errors="replace"),
                                      r.stderr.decode(errors="replace"))
    if check and r.returncode != 0:
        raise LocalClusterError(f"ctr {' '.join(args)} failed: {out.stderr.strip()}")
    return out


def start(layout: Layout, pki: Pki, server: str, node: NodePlan,
          started: list[procs.Proc], record: Callable[[], object], say: Say) -> None:
    """Start containerd, cluster DNS, kubelet and kube-proxy; wait until the node is Ready."""
    try:
        _start(layout, pki, server, node, started, record, say)
    except (LocalClusterError, OSError) as e:
        raise LocalClusterError(
            f"the real node did not start: {e}\n(`nightshift-localcluster up --no-real-node` "
            "or NIGHTSHIFT_REAL_NODE=0 starts the cluster without it)") from e


def _start(layout: Layout, pki: Pki, server: str, node: NodePlan,
           started: list[procs.Proc], record: Callable[[], object], say: Say) -> None:
    t0 = time.monotonic()
    journal = Journal(node.journal)
    journal.snapshot()
    for d in node.dirs:
        d.mkdir(parents=True, exist_ok=True)
    node.containerd_config.write_text(nodeconfig.containerd_toml(node))
    (node.cni_conf_dir / "10-nightshift.conflist").write_text(nodeconfig.cni_conflist(node))
    node.kubelet_config.write_text(yaml.safe_dump(nodeconfig.kubelet_yaml(node, pki.ca_crt)))
    node.resolv_conf.write_text(nodeconfig.resolv_conf(host_resolvers(), node.gateway))
    kcs = layout.state / "kubeconfigs"
    for ident in ("kubelet", "kube-proxy", "dns"):
        write_kubeconfig(kcs / f"{ident}.yaml", pki.kubeconfig(ident, server))
    node.proxy_config.write_text(yaml.safe_dump(nodeconfig.proxy_yaml(node,
                                                                      kcs / "kube-proxy.yaml")))

    say(f"real node: bridge {nodeconfig.BRIDGE} ({node.gateway}/24), forwarding on")
    journal.add_bridge(nodeconfig.BRIDGE, f"{node.gateway}/24")
    journal.set_sysctl("net/ipv4/ip_forward", "1")
    say(f"real node: {nodeconfig.NODE_HOST_ROOT} as a shared mount (mount propagation)")
    journal.shared_mount(Path(nodeconfig.NODE_HOST_ROOT))
    # Service traffic between two pods on the bridge must pass through iptables.
    for key in ("net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"):
        if Path("/proc/sys", key).exists():
            journal.set_sysctl(key, "1")

    say("real node: containerd")
    cd = procs.start("containerd", ["containerd", f"--config={node.containerd_config}"],
                     layout.logs)
    started.append(cd)
    record()
    procs.wait_until("containerd", lambda: ctr(node, "version", check=False).returncode == 0,
                     30, cd)
    if node.shared_root is not None:
        (node.shared_root.parent / SHARED_OWNER).write_text(f"{cd.pid}\n{layout.state}\n")
    ctr(node, "images", "import", "-", stdin=pause.build(layout.cache, nodeconfig.PAUSE_IMAGE))

    _kubectl(layout, "apply", "--server-side", "-f", "-", input_=DNS_RBAC)
    dns = procs.start("cluster-dns", [sys.executable, "-m", "nightshift_localcluster.dns",
                                      f"--listen={node.gateway}:53",
                                      f"--kubeconfig={kcs / 'dns.yaml'}"], layout.logs)
    started.append(dns)
    say("real node: kubelet, kube-proxy")
    kl = procs.start("kubelet", nodeconfig.kubelet_argv(layout.bin("kubernetes", "kubelet"),
                                                        node, kcs / "kubelet.yaml"), layout.logs)
    started.append(kl)
    kp = procs.start("kube-proxy", nodeconfig.proxy_argv(layout.bin("kubernetes", "kube-proxy"),
                                                         node), layout.logs)
    started.append(kp)
    record()
    procs.wait_until("kubelet /healthz", lambda: procs.http_ok(
        f"http://127.0.0.1:{node.kubelet_healthz_port}/healthz"), 60, kl)
    procs.wait_until("kube-proxy /healthz", lambda: procs.http_ok(
        f"http://127.0.0.1:{node.proxy_healthz_port}/healthz"), 60, kp)
    procs.wait_until(f"node {NODE_NAME} Ready", lambda: _node_ready(layout), 90, kl)
    if not procs.alive(dns):
        raise LocalClusterError(f"cluster DNS exited; see {dns.log}:\n{procs.tail(dns.log)}")
    say(f"real node: {NODE_NAME} Ready in {time.monotonic() - t0:.1f}s "
        f"(taint {nodeconfig.NODE_TAINT['key']}=true:NoSchedule)")


def _node_ready(layout: Layout) -> bool:
    r = subprocess.run([str(layout.kubectl), f"--kubeconfig={layout.kubeconfig}", "get", "node",
                        NODE_NAME, "-o",
                        "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
                       capture_output=True, text=True, check=False)
    return r.stdout.strip() == "True"


def stop(layout: Layout, running: list[procs.Proc], api_up: bool, say: Say) -> None:
    """Stop the node's parts gracefully where possible, then undo the host changes."""
    node_dir = layout.state / "realnode"
    ours = {p.name: p for p in running if p.name in PROCS}
    node = NodePlan(dir=node_dir, subnet="", kubelet_port=0, kubelet_healthz_port=0,
                    proxy_healthz_port=0, proxy_metrics_port=0)
    have_ctr = "containerd" in ours and procs.alive(ours["containerd"])
    if api_up and "kubelet" in ours and procs.alive(ours["kubelet"]) and have_ctr:
        # The kubelet tears pods down properly (volumes, CNI); give it a few seconds.
        say("real node: removing its pods")
        subprocess.run([str(layout.kubectl), f"--kubeconfig={layout.kubeconfig}", "delete",
                        "pods", "-A", f"--field-selector=spec.nodeName={NODE_NAME}",
                        "--grace-period=1", "--wait=false"],
                       capture_output=True, check=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and ctr(node, "containers", "ls", "-q",
                                                  check=False).stdout.strip():
            time.sleep(0.5)
    for name in ("kube-proxy", "kubelet", "cluster-dns"):
        if name in ours and procs.alive(ours[name]):
            say(f"stopping {name} (pid {ours[name].pid})")
            procs.stop(ours[name])
    if have_ctr:
        _kill_containers(node)
        say(f"stopping containerd (pid {ours['containerd'].pid})")
        procs.stop(ours["containerd"])
    _kill_shims(node)
    left = Journal(node.journal).revert(node_dir, say)
    for d in (node_dir / "run",):
        subprocess.run(["rm", "-rf", str(d)], check=False)
    if not left:
        say("real node: host changes reverted (bridge, iptables, sysctls, netns, cgroups, "
            "mounts)")


def _kill_containers(node: NodePlan) -> None:
    for task in ctr(node, "tasks", "ls", "-q", check=False).stdout.split():
        ctr(node, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        tasks = ctr(node, "tasks", "ls", "-q", check=False).stdout.split()
        for task in tasks:
            ctr(node, "tasks", "delete", task, check=False)
        if not tasks:
            break
        time.sleep(0.3)
    for c in ctr(node, "containers", "ls", "-q", check=False).stdout.split():
        ctr(node, "containers", "delete", c, check=False)


def _kill_shims(node: NodePlan) -> None:
    """containerd-shim processes outlive containerd; ours name our socket on their command
    line, so exactly those are stopped."""
    sock = str(node.containerd_sock).encode()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and sock in cmd:
            procs.stop(procs.Proc(name="containerd-shim", pid=int(p.name),
                                  exe=cmd[0].decode(), log=""), timeout=3)
