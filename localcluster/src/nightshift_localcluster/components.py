"""Command lines of the local cluster's components: pure, so they are easy to read and test."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from nightshift_localcluster.paths import Layout
from nightshift_localcluster.pki import SERVICE_CIDR, Pki


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    karpenter_metrics: int
    karpenter_health: int


@dataclass(frozen=True)
class Qps:
    """Client rate limits for the controller-manager and scheduler.

    Their defaults (20 QPS, burst 30) cap an Indexed Job's pod creation near 10 pods/s;
    large fan-outs need more. `up --default-qps` keeps the upstream defaults.
    """

    qps: int = 300
    burst: int = 600

    @classmethod
    def upstream_defaults(cls) -> Qps:
        return cls(qps=20, burst=30)


def etcd(layout: Layout, ports: Ports) -> list[str]:
    data = layout.state / "etcd"
    return [
        str(layout.bin("etcd", "etcd")),
        "--name=nightshift",
        f"--data-dir={data}",
        f"--listen-client-urls=http://127.0.0.1:{ports.etcd_client}",
        f"--advertise-client-urls=http://127.0.0.1:{ports.etcd_client}",
        f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
        f"--initial-cluster=nightshift=http://127.0.0.1:{ports.etcd_peer}",
        "--quota-backend-bytes=4294967296",
        "--log-level=warn",
        # The cluster is disposable: trade durability for speed on a small VM.
        "--unsafe-no-fsync",
    ]


def apiserver(
    layout: Layout, pki: Pki, ports: Ports, bind: str = "127.0.0.1", advertise: str | None = None,
    profiling: bool = False,
) -> list[str]:
    argv = [
        str(layout.bin("kubernetes", "kube-apiserver")),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--bind-address={bind}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.server_crt}",
        f"--tls-private-key-file={pki.server_key}",
        f"--client-ca-file={pki.ca_crt}",
        f"--token-auth-file={pki.tokens_csv}",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        f"--audit-policy-file={layout.root / 'hack' / 'audit-policy.yaml'}",
        f"--audit-log-path={layout.logs / 'audit.log'}",
        "--audit-log-maxsize=4000",
        "--audit-log-maxbackup=1",
        "--max-requests-inflight=800",
        "--max-mutating-requests-inflight=400",
        # Off unless asked (`up --profiling`): /debug/pprof is for a bench's CPU profile.
        f"--profiling={str(profiling).lower()}",
    ]
    if advertise:
        argv.append(f"--advertise-address={advertise}")
    else:
        # No address a pod could reach: keep the `kubernetes` Service without endpoints
        # rather than advertise loopback (which the endpoint reconciler refuses).
        argv += ["--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
    return argv


def controller_manager(layout: Layout, pki: Pki, ports: Ports, qps: Qps) -> list[str]:
    kc = layout.state / "kubeconfigs" / "controller-manager.yaml"
    return [
        str(layout.bin("kubernetes", "kube-controller-manager")),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        # nodeipam would need a cluster CIDR; node lifecycle stays on because it is what
        # removes the not-ready taint from new nodes.
        "--controllers=*,-nodeipam",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_crt}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca_crt}",
        f"--cluster-signing-key-file={pki.ca_key}",
        "--leader-elect=false",
        f"--kube-api-qps={qps.qps}",
        f"--kube-api-burst={qps.burst}",
        "--concurrent-job-syncs=10",
    ]


def scheduler(layout: Layout, ports: Ports, qps: Qps) -> list[str]:
    kc = layout.state / "kubeconfigs" / "scheduler.yaml"
    return [
        str(layout.bin("kubernetes", "kube-scheduler")),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--leader-elect=false",
        f"--kube-api-qps={qps.qps}",
        f"--kube-api-burst={qps.burst}",
    ]


def kwok_stage_files(layout: Layout) -> list[Path]:
    stage = layout.kwok_src / "kustomize" / "stage"
    files = [
        stage / "node" / "fast" / "node-initialize.yaml",
        stage / "node" / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml",
    ]
    files += sorted((stage / "pod" / "general").glob("pod-*.yaml"))
    files += [layout.root / "hack" / "kwok" / f for f in ("pod-exit-code.yaml",
                                                          "pod-sim-duration.yaml",
                                                          "pod-image-pull.yaml",
                                                          "pod-delete-unstarted.yaml")]
    return files


def kwok(layout: Layout, ports: Ports) -> list[str]:
    kc = layout.state / "kubeconfigs" / "kwok.yaml"
    argv = [
        str(layout.bin("kwok", "kwok")),
        f"--kubeconfig={kc}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--server-address=127.0.0.1:{ports.kwok}",
        "--node-lease-duration-seconds=40",
    ]
    argv += [f"--config={f}" for f in kwok_stage_files(layout)]
    return argv


def karpenter(layout: Layout, ports: Ports) -> tuple[list[str], dict[str, str]]:
    env = {
        "KUBECONFIG": str(layout.state / "kubeconfigs" / "karpenter.yaml"),
        "SYSTEM_NAMESPACE": "kube-system",
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(ports.karpenter_metrics),
        "HEALTH_PROBE_PORT": str(ports.karpenter_health),
        "INSTANCE_TYPES_FILE_PATH": str(layout.instance_types_file),
        "LOG_LEVEL": "info",
        # Small batching windows: the local cluster should react in a second or two.
        "BATCH_IDLE_DURATION": "1s",
        "BATCH_MAX_DURATION": "3s",
    }
    return [str(layout.bin("karpenter", "karpenter-kwok"))], env


# The MPI Operator serves /healthz on this fixed port (a constant in its server.go).
MPI_OPERATOR_HEALTH_PORT = 8080


def mpi_operator(layout: Layout) -> list[str]:
    """The Kubeflow MPI Operator (MPIJob v2beta1), which runs Nightshift's MPI stages."""
    kc = layout.state / "kubeconfigs" / "mpi-operator.yaml"
    return [
        # Started again when it exits, as its Deployment would (supervise.py says why).
        sys.executable, "-m", "nightshift_localcluster.supervise",
        str(layout.bin("mpi-operator", "mpi-operator")),
        f"--kubeConfig={kc}",
        # Its leader-election Lease; the upstream default namespace does not exist here.
        "--lock-namespace=kube-system",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
    ]


def mpi_crd_file(layout: Layout) -> Path:
    return layout.mpi_operator_src / "manifests" / "base" / "kubeflow.org_mpijobs.yaml"


def crd_files(layout: Layout) -> list[Path]:
    """Karpenter core, AWS EC2NodeClass and KWOKNodeClass CRDs from the module cache."""
    core = layout.karpenter_src / "pkg" / "apis" / "crds"
    files = sorted(core.glob("karpenter.sh_*.yaml"))
    files.append(layout.karpenter_src / "kwok" / "apis" / "crds" /
                 "karpenter.kwok.sh_kwoknodeclasses.yaml")
    files.append(layout.karpenter_aws_src / "pkg" / "apis" / "crds" /
                 "karpenter.k8s.aws_ec2nodeclasses.yaml")
    return files
