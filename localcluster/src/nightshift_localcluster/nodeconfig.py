"""Configuration files of the real node's parts (containerd, CNI, kubelet, kube-proxy): pure.

Everything lives under `.localcluster/realnode/`, so nothing of Debian's own
containerd/kubelet set-up (/etc/containerd, /var/lib/kubelet, /etc/cni) is touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE_NAME = "nightshift-real"
# Pods that want the real node select this label and tolerate this taint; nothing else
# lands there, so KWOK-scale tests never crowd two real cores.
NODE_LABEL = ("nightshift.io/real-node", "true")
NODE_TAINT = {"key": "nightshift.io/real-node", "value": "true", "effect": "NoSchedule"}
BRIDGE = "nightshift0"
# The operator's node directory (nightshift.sharedstorage.objects.HOST_ROOT): made a
# shared mount so FUSE clients' Bidirectional mounts reach the other pods.
NODE_HOST_ROOT = "/var/lib/nightshift"
POD_SUBNETS = ["10.244.0.0/24", "10.245.0.0/24", "172.30.244.0/24"]
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/nightshift-pause:1"
CNI_BIN_DIR = Path("/usr/lib/cni")


@dataclass(frozen=True)
class NodePlan:
    """Where the real node lives and the addresses it uses, chosen at `up`."""

    dir: Path  # .localcluster/realnode
    subnet: str  # the pods' /24 on the bridge
    kubelet_port: int
    kubelet_healthz_port: int
    proxy_healthz_port: int
    proxy_metrics_port: int
    # containerd's root (content, snapshots, metadata), kept across up/down so imported
    # images survive: the build cache's (realnode.shared_root) unless another
    # checkout's node holds it. None: this checkout's own.
    shared_root: Path | None = None

    @property
    def gateway(self) -> str:
        """The bridge's own address: pods reach the host (API server, DNS, S3) here."""
        base = self.subnet.split("/")[0].rsplit(".", 1)[0]
        return f"{base}.1"

    @property
    def containerd_root(self) -> Path:
        return self.shared_root or self.dir / "containerd" / "root"

    @property
    def dirs(self) -> tuple[Path, ...]:
        """What `up` makes before the node starts (the root may be outside `dir`)."""
        return (self.containerd_root, self.containerd_state, self.containerd_config.parent,
                self.cni_conf_dir, self.kubelet_root)

    @property
    def containerd_state(self) -> Path:
        return self.dir / "run" / "containerd"

    @property
    def containerd_sock(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.dir / "containerd" / "config.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.dir / "run" / "cni-ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "run" / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.dir / "kubelet.yaml"

    @property
    def proxy_config(self) -> Path:
        return self.dir / "kube-proxy.yaml"

    @property
    def resolv_conf(self) -> Path:
        return self.dir / "resolv.conf"

    @property
    def journal(self) -> Path:
        """Host changes made for the node, undone by `down` (see hostchanges.py)."""
        return self.dir / "host-changes.json"


def containerd_toml(plan: NodePlan) -> str:
    d = plan.dir
    # restrict_oom_score_adj: root may lack CAP_SYS_RESOURCE (seen in VMs and sandboxes);
    # without it every sandbox fails with "can't get final child's PID from pipe".
    return f"""version = 2
root = "{plan.containerd_root}"
state = "{plan.containerd_state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{plan.containerd_sock}"

[ttrpc]
  address = "{plan.containerd_sock}.ttrpc"

[debug]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "containerd" / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{plan.cni_conf_dir}"
"""


def cni_conflist(plan: NodePlan) -> str:
    conf: dict[str, Any] = {
        "cniVersion": "0.4.0",
        "name": "nightshift",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                # Pods reach beyond the host (PyPI, S3 elsewhere) through the host's address.
                "ipMasq": True,
                # A pod reaching itself through a Service IP.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": plan.subnet, "gateway": plan.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(plan.cni_data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def kubelet_yaml(plan: NodePlan, ca: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": plan.gateway,
        "port": plan.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": plan.kubelet_healthz_port,
        # Only holders of a client certificate from the cluster CA (the API server) may
        # use the kubelet's API; there are no other client certificates.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{plan.containerd_sock}",
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "failCgroupV1": False,
        "clusterDNS": [plan.gateway],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(plan.resolv_conf),
        "registerWithTaints": [NODE_TAINT],
        "maxPods": 30,
        "serializeImagePulls": False,
        # Locally built images exist nowhere else: never garbage-collect them, and keep
        # eviction thresholds low so a fairly full developer disk does not taint the node.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%",
                         "imagefs.available": "2%"},
        "nodeStatusReportFrequency": "10s",
    }


def kubelet_argv(kubelet: Path, plan: NodePlan, kubeconfig: Path) -> list[str]:
    return [
        str(kubelet),
        f"--config={plan.kubelet_config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={plan.kubelet_root}",
        f"--cert-dir={plan.kubelet_root / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={plan.gateway}",
        f"--node-labels={NODE_LABEL[0]}={NODE_LABEL[1]}",
        "--v=1",
    ]


def proxy_yaml(plan: NodePlan, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": plan.subnet,
        "healthzBindAddress": f"127.0.0.1:{plan.proxy_healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{plan.proxy_metrics_port}",
        # Leave host-wide knobs alone: no conntrack table resizing, no route_localnet.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
        "nodePortAddresses": [f"{plan.gateway}/32"],
    }


def proxy_argv(kube_proxy: Path, plan: NodePlan) -> list[str]:
    return [str(kube_proxy), f"--config={plan.proxy_config}", "--v=1"]


def resolv_conf(upstream: list[str], gateway: str) -> str:
    """For pods with dnsPolicy Default: the host's resolvers, or (when those are on
    loopback, as with systemd-resolved) our DNS server, which forwards to them."""
    servers = [s for s in upstream if not s.startswith("127.")] or [gateway]
    return "".join(f"nameserver {s}\n" for s in servers)


def imported_dir(containerd_config: Path) -> Path | None:
    """Where hack/images.sh stamps what it imported (each image's docker ID): beside the
    root the node's containerd config names, so the stamps follow the images. None
    before the node's first start."""
    try:
        text = containerd_config.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("root = "):
            return Path(line.split("=", 1)[1].strip().strip('"')).parent / "nightshift-imported"
    return None
