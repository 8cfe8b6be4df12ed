"""Certificates, service-account keys, static tokens and kubeconfigs for the local cluster.

Generated once per state directory with openssl, so a warm `up` reuses them and
kubeconfigs handed out earlier stay valid.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from nightshift_localcluster.paths import LocalClusterError

# Identities with static bearer tokens. Each component gets its own user so the API
# server's audit log tells who wrote what (bench/fanout.py counts the operator's
# writes that way). Groups give them their bootstrap RBAC roles.
IDENTITIES: dict[str, tuple[str, str]] = {
    "admin": ("nightshift-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "kwok": ("nightshift-kwok", "system:masters"),
    "karpenter": ("nightshift-karpenter", "system:masters"),
    "mpi-operator": ("nightshift-mpi-operator", "system:masters"),
    "operator": ("nightshift-operator", "system:masters"),
    "kube-proxy": ("system:kube-proxy", ""),
    # The real node (realnode.py): the Node authorizer knows a kubelet by this name/group.
    "kubelet": ("system:node:nightshift-real", "system:nodes"),
    "dns": ("nightshift-dns", ""),
}

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def server_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    @property
    def tokens_csv(self) -> Path:
        return self.dir / "tokens.csv"

    def token(self, identity: str) -> str:
        for line in self.tokens_csv.read_text().splitlines():
            parts = line.split(",")
            if parts[1].strip('"') == IDENTITIES[identity][0]:
                return parts[0]
        raise LocalClusterError(f"no token for {identity} in {self.tokens_csv}")

    def ensure(self, extra_ips: list[str] | None = None) -> None:
        if shutil.which("openssl") is None:
            raise LocalClusterError("openssl is missing: apt-get install -y openssl")
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.ca_crt.exists():
            _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                     "-subj", "/CN=nightshift-local-ca", "-keyout", str(self.ca_key),
                     "-out", str(self.ca_crt))
        ips = ["127.0.0.1", SERVICE_IP, *(extra_ips or [])]
        sans_file = self.dir / "apiserver.sans"
        sans = ",".join(
            [f"IP:{ip}" for ip in ips]
            + [f"DNS:{d}" for d in ("localhost", "kubernetes", "kubernetes.default",
                                    "kubernetes.default.svc",
                                    "kubernetes.default.svc.cluster.local")]
        )
        if not self.server_crt.exists() or sans_file.read_text() != sans:
            csr = self.dir / "apiserver.csr"
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
                     "-keyout", str(self.server_key), "-out", str(csr))
            ext = self.dir / "apiserver.ext"
            ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
            _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca_crt), "-CAkey",
                     str(self.ca_key), "-CAcreateserial", "-days", "3650",
                     "-extfile", str(ext), "-out", str(self.server_crt))
            sans_file.write_text(sans)
        if not self.sa_key.exists():
            _openssl("genrsa", "-out", str(self.sa_key), "2048")
            _openssl("rsa", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub))
        # Identities added since the file was written get a token too; old ones keep theirs.
        text = self.tokens_csv.read_text() if self.tokens_csv.exists() else ""
        have = {line.split(",")[1] for line in text.splitlines() if line.count(",") >= 2}
        rows = [f'{secrets.token_hex(16)},{user},{user},"{group}"'
                for user, group in IDENTITIES.values() if user not in have]
        if rows:
            self.tokens_csv.write_text(text + "\n".join(rows) + "\n")
            self.tokens_csv.chmod(0o600)

    def kubeconfig(self, identity: str, server: str) -> dict[str, object]:
        return kubeconfig_dict(server, self.ca_crt, self.token(identity), identity)


def kubeconfig_dict(server: str, ca: Path, token: str, user: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "nightshift-local",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "nightshift-local",
                      "context": {"cluster": "nightshift-local", "user": user}}],
        "current-context": "nightshift-local",
    }


def write_kubeconfig(path: Path, config: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _openssl(*args: str) -> None:
    r = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise LocalClusterError(f"openssl {args[0]} failed: {r.stderr.strip()}")
