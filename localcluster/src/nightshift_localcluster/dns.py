"""Cluster DNS for the real node's pods: a small resolver in place of CoreDNS.

Answers A queries for `<service>.<namespace>.svc.<domain>` (the ClusterIP, or the ready
endpoint addresses of a headless Service), `<hostname>.<service>.<namespace>.svc.<domain>`
(a pod with a hostname/subdomain, e.g. an Indexed Job's pods) and
`<a-b-c-d>.<namespace>.pod.<domain>`; NXDOMAIN for other names under the domain; every
other query is relayed to the host's resolvers. Each name is looked up on demand with a
GET of that one Service (cached a second), so it costs nothing while idle and never
lists the cluster. UDP only: its answers are small.

Run by `nightshift-localcluster up` as
`python -m nightshift_localcluster.dns --listen IP:53 --kubeconfig FILE`.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

A, AAAA = 1, 28
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3
TTL = 5


class Api:
    def __init__(self, kubeconfig: Path) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        self.server = cluster["server"].rstrip("/")
        if not self.server.startswith("https://"):  # the bearer token goes only over TLS
            raise ValueError(f"{kubeconfig}: server {self.server!r} is not an https:// URL")
        self.token = cfg["users"][0]["user"]["token"]
        self.ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.cache: dict[str, tuple[float, Any]] = {}
        self.lock = threading.Lock()
        # One GET per path at a time: a pod's resolver asks A and AAAA for each name in
        # its search list, so a burst of lookups (16 client threads at once) was dozens
        # of queries for one Service, each opening its own TLS connection to a loaded
        # API server while the pod's resolver timed out.
        self.in_flight: dict[str, threading.Lock] = {}

    def get(self, path: str) -> Any:
        """The object at path, or None when it does not exist (cached one second). A
        query that finds the path being read waits for that read and takes its answer."""
        hit = self._cached(path)
        if hit is not None:
            return hit[1]
        with self.lock:
            flight = self.in_flight.setdefault(path, threading.Lock())
        with flight:
            hit = self._cached(path)
            if hit is not None:
                return hit[1]
            now = time.monotonic()
            value = self.fetch(path)
            with self.lock:
                self.cache[path] = (now, value)
            return value

    def _cached(self, path: str) -> tuple[float, Any] | None:
        with self.lock:
            hit = self.cache.get(path)
        return hit if hit and time.monotonic() - hit[0] < 1.0 else None

    def fetch(self, path: str) -> Any:
        req = urllib.request.Request(self.server + path,  # noqa: S310  (https checked in __init__)
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=3, context=self.ctx) as r:  # noqa: S310  (https checked in __init__)
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
            return None


def endpoint_addresses(api: Api, ns: str, svc: str, hostname: str | None = None) -> list[str]:
    slices = api.get(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
                     f"?labelSelector=kubernetes.io%2Fservice-name%3D{svc}")
    out = []
    for sl in (slices or {}).get("items", []):
        if sl.get("addressType") != "IPv4":
            continue
        for ep in sl.get("endpoints") or []:
            if ep.get("conditions", {}).get("ready") is False:
                continue
            if hostname is not None and ep.get("hostname") != hostname:
                continue
            out += ep.get("addresses", [])
    return out


def resolve(api: Api, labels: list[str], domain: list[str]) -> tuple[int, list[str]]:
    """(rcode, IPv4 addresses) for a name under the cluster domain, given as labels."""
    rest = labels[: len(labels) - len(domain)]
    if len(rest) == 3 and rest[2] == "svc":
        svc, ns = rest[0], rest[1]
        obj = api.get(f"/api/v1/namespaces/{ns}/services/{svc}")
        if obj is None:
            return NXDOMAIN, []
        ip = obj.get("spec", {}).get("clusterIP")
        if ip and ip != "None":
            return NOERROR, [ip]
        return NOERROR, endpoint_addresses(api, ns, svc)
    if len(rest) == 4 and rest[3] == "svc":
        addrs = endpoint_addresses(api, rest[2], rest[1], hostname=rest[0])
        return (NOERROR, addrs) if addrs else (NXDOMAIN, [])
    if len(rest) == 3 and rest[2] == "pod":
        try:
            return NOERROR, [str(ipaddress.IPv4Address(rest[0].replace("-", ".")))]
        except ValueError:
            return NXDOMAIN, []
    return NXDOMAIN, []


def parse_question(msg: bytes) -> tuple[list[str], int, int]:
    """Labels (lower case), qtype, and the offset just past the question."""
    pos, labels = 12, []
    while True:
        n = msg[pos]
        if n == 0:
            pos += 1
            break
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(msg[pos + 1: pos + 1 + n].decode("ascii", "replace").lower())
        pos += 1 + n
    qtype = struct.unpack("!H", msg[pos: pos + 2])[0]
    return labels, qtype, pos + 4


def answer(query: bytes, end: int, rcode: int, ips: list[str]) -> bytes:
    qid, flags = struct.unpack("!HH", query[:4])
    # QR, opcode copied, AA, RD copied, RA, rcode.
    out_flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode
    header = struct.pack("!HHHHHH", qid, out_flags, 1, len(ips), 0, 0)
    body = query[12:end]
    for ip in ips:
        # Name: a pointer to the question's name at offset 12.
        body += struct.pack("!HHHIH", 0xC00C, A, 1, TTL, 4) + socket.inet_aton(ip)
    return header + body


class Resolver:
    def __init__(self, api: Api, domain: str, upstream: list[str]) -> None:
        self.api = api
        self.domain = domain.lower().strip(".").split(".")
        self.upstream = upstream

    def handle(self, query: bytes) -> bytes | None:
        try:
            labels, qtype, end = parse_question(query)
        except (IndexError, ValueError, struct.error):
            return None
        n = len(self.domain)
        if len(labels) > n and labels[-n:] == self.domain:
            try:
                rcode, ips = resolve(self.api, labels, self.domain)
            except (urllib.error.URLError, OSError, ValueError) as e:
                print(f"dns: API lookup of {'.'.join(labels)} failed: {e}", file=sys.stderr)
                return answer(query, end, SERVFAIL, [])
            return answer(query, end, rcode, ips if qtype == A else [])
        return self.forward(query)

    def forward(self, query: bytes) -> bytes | None:
        for server in self.upstream:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(2.0)
                try:
                    s.sendto(query, (server, 53))
                    data, _ = s.recvfrom(4096)
                    return data
                except OSError:
                    continue
        return None


def host_resolvers(resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    out = []
    for line in resolv_conf.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver" and ":" not in parts[1]:
            out.append(parts[1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nightshift-localcluster-dns")
    ap.add_argument("--listen", required=True, help="IP:PORT")
    ap.add_argument("--kubeconfig", required=True, type=Path)
    ap.add_argument("--domain", default="cluster.local")
    ap.add_argument("--upstream", action="append", help="resolver (default: /etc/resolv.conf)")
    args = ap.parse_args(argv)
    resolver = Resolver(Api(args.kubeconfig), args.domain, args.upstream or host_resolvers())
    host, port = args.listen.rsplit(":", 1)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            data, sock = self.request
            reply = resolver.handle(data)
            if reply is not None:
                sock.sendto(reply, self.client_address)

    socketserver.ThreadingUDPServer.daemon_threads = True
    with socketserver.ThreadingUDPServer((host, int(port)), Handler) as server:
        print(f"dns: serving {args.domain} on {args.listen}, upstream {resolver.upstream}",
              flush=True)
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
