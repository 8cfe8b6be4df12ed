"""SharedStorage daemons for real (squid and nfs-ganesha; glusterfs is in
test_gluster_real.py), on the local cluster's real node (containerd + kubelet), from
the objects the renderers make, placed on the real node (which is not a Nightshift
pool: its own label and taint) and with the images `make images` loads:

- squid: the rendered squid.conf, Deployment and Service; a repository-shaped tree
  (CVMFS-like: a manifest, many small content-addressed objects, a few 10 MB ones)
  served by an HTTP origin on the host stands in for a stratum-1; a client pod fetches
  everything twice through the Service; the origin sees each object once; the
  operator's sampler reads the squid's cache manager.
- nfs: the rendered nfs-ganesha Deployment and Service, a user-space client in a pod
  (this kernel has no NFS client for the kubelet to mount with).

Skipped without the real node or its images (`make images`).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import socketserver
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

import pytest

from nightshift.api import names
from nightshift.sharedstorage import nfs, reclaim, squid
from nightshift.sharedstorage.objects import Storage
from nightshift.sharedstorage.observe import SquidSampler, http_get
from nightshift.sharedstorage.status import SquidSample
from nightshift_localcluster.nodeconfig import NODE_NAME
from tests.clusterutil import Kubectl, wait_for
from tests.integration.realstorage import REPO, RUNNER, TAG, need_image, place
from tests.integration.test_real_node import (
    gateway,
    pod_job,
    real_node,
    wait_job,
)

__all__ = ["gateway", "real_node"]


# -- the origin: a repository-shaped tree over HTTP --------------------------------------

class Origin:
    """A stratum-1 stand-in on the host: files under /cvmfs/<repo>/, each GET counted."""

    def __init__(self, host: str, root: Path) -> None:
        self.root = root
        self.hits: dict[str, int] = {}
        lock = threading.Lock()
        origin = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=str(root), **kw)

            def do_GET(self) -> None:
                with lock:
                    origin.hits[self.path] = origin.hits.get(self.path, 0) + 1
                super().do_GET()

            def log_message(self, *a: Any) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            request_queue_size = 128  # a burst of squid's connections, not 5

        self.server = Server((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()


def make_tree(root: Path, small: int, large: int) -> dict[str, str]:
    """A manifest, `small` 1-4 KB and `large` 10 MB content-addressed objects: the
    paths (under /cvmfs/REPO) and their sha256."""
    repo = root / "cvmfs" / REPO
    (repo / "data").mkdir(parents=True)
    out = {}
    (repo / ".cvmfspublished").write_bytes(b"C" + os.urandom(20).hex().encode() + b"\n")
    out["/.cvmfspublished"] = hashlib.sha256((repo / ".cvmfspublished").read_bytes()).hexdigest()
    for i in range(small + large):
        body = os.urandom(10 * 2**20 if i >= small else 1024 + (i * 37) % 3072)
        # CVMFS names its objects by SHA-1 of their content.
        digest = hashlib.sha1(body, usedforsecurity=False).hexdigest()
        path = repo / "data" / digest[:2] / digest[2:]
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(body)
        out[f"/data/{digest[:2]}/{digest[2:]}"] = hashlib.sha256(body).hexdigest()
    return out


@pytest.fixture
def origin(gateway: str) -> Iterator[tuple[Origin, dict[str, str]]]:
    with tempfile.TemporaryDirectory(prefix="nightshift-origin-") as d:
        tree = make_tree(Path(d), small=300, large=6)
        o = Origin(gateway, Path(d))
        try:
            yield o, tree
        finally:
            o.stop()


# Clients first wait until the proxy's Service takes connections: the squids are Ready
# (rollout status) before kube-proxy has programmed their endpoints, and until then the
# Service refuses (a CI-like run saw 8 of 307 first requests refused). A CVMFS client
# retries the same way; any error after that counts. bench/squid.py's client uses it too.
WAIT_FOR_PROXY = """
def wait_for_proxy(proxy):
    import socket, time, urllib.parse
    u = urllib.parse.urlsplit(proxy)
    deadline, ok = time.monotonic() + 60, 0
    while ok < 3:
        try:
            socket.create_connection((u.hostname, u.port or 80), timeout=2).close()
            ok += 1
        except OSError:
            if time.monotonic() > deadline:
                raise
            ok = 0
        time.sleep(0.5)
"""

CLIENT = WAIT_FOR_PROXY + """
import concurrent.futures as cf, hashlib, json, os, time, urllib.request
proxy, base = os.environ["PROXY"], os.environ["BASE"]
tree = json.loads(os.environ["TREE"])
wait_for_proxy(proxy)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
def get(path):
    t = time.monotonic()
    try:
        with opener.open(base + path, timeout=60) as r:
            body = r.read()
            cache = (r.headers.get("X-Cache") or "none").split(" ")[0]
        ok = hashlib.sha256(body).hexdigest() == tree[path]
        return ok, len(body), time.monotonic() - t, cache if ok else "corrupt " + path
    except Exception as e:
        return False, 0, time.monotonic() - t, f"{path}: {e}"
t = time.monotonic()
with cf.ThreadPoolExecutor(16) as ex:
    res = list(ex.map(get, list(tree)))
wall = time.monotonic() - t
lat = sorted(r[2] for r in res)
print(json.dumps({"requests": len(res), "errors": sum(not r[0] for r in res),
                  "bytes": sum(r[1] for r in res), "seconds": round(wall, 3),
                  "x_cache": {c: sum(r[3] == c for r in res) for c in {"HIT", "MISS"}},
                  "failures": [r[3] for r in res if not r[0]][:4],
                  "p50_ms": round(lat[len(lat) // 2] * 1000, 1),
                  "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 1)}))
"""


def test_real_squid_serves_the_tree_through_its_service(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str, gateway: str,
        origin: tuple[Origin, dict[str, str]]) -> None:
    need_image(real_node, f"{squid.IMAGE}:{TAG}")
    o, tree = origin
    upstream = f"http://{gateway}:{o.port}/cvmfs/@fqrn@"
    st = Storage.of({"metadata": {"name": "sw", "namespace": namespace, "uid": "u"},
                     "spec": {"type": "cvmfs", "cvmfs": {
                         "repositories": [REPO], "client": {"pools": ["none"]},
                         "squid": {"upstreams": [upstream], "memoryCache": "256Mi",
                                   "diskCache": "2Gi", "cpu": "250m"}}}})
    # The pods' and the host's addresses on the real node's bridge.
    objs = place(squid.render_squid(st, platform="local", allowed_cidrs=["10.244.0.0/16"]))
    for obj in objs:
        kubectl.apply(obj)
    kubectl("-n", namespace, "rollout", "status", "deployment/sw-squid", "--timeout=180s")
    base = upstream.replace("@fqrn@", REPO)
    rounds, origin_after = [], []
    for rnd in (1, 2):
        job = f"client{rnd}"
        kubectl.apply(pod_job(job, namespace, {
            "image": RUNNER, "command": ["python3", "-c", CLIENT],
            "env": [{"name": "PROXY", "value": squid.proxy_url(st)},
                    {"name": "BASE", "value": base},
                    {"name": "TREE", "value": json.dumps(tree)}]}))
        wait_job(kubectl, job, namespace, timeout=300)
        rounds.append({"round": rnd,
                       **json.loads(kubectl("logs", f"job/{job}", "-n", namespace).stdout)})
        origin_after.append(sum(n for p, n in o.hits.items() if "/data/" in p))
    print("squid rounds:", json.dumps(rounds))
    assert [r["errors"] for r in rounds] == [0, 0]
    assert all(r["requests"] == len(tree) for r in rounds)
    # Round 1 reached the origin for every object (squid may retry an upstream
    # connection, so at least once); round 2 not at all: all from the cache.
    data = {p for p in o.hits if "/data/" in p}
    assert len(data) == len(tree) - 1, sorted(data)[:5]
    assert origin_after[1] == origin_after[0], f"round 2 reached the origin: {origin_after}"
    # The operator's sampler reads the squid's cache manager from the host (the
    # cluster's ranges). Squid averages between its once-a-minute snapshots of its
    # counters, so the client's requests show from the first snapshot after them on.
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-l",
                              f"{names.LABEL_COMPONENT}=squid", "-o", "json").stdout)["items"]

    def sampled() -> list[SquidSample]:
        got = SquidSampler().samples(namespace, "sw", pods)
        return got if got and got[0].requests_per_second > 0 else []

    samples = wait_for("the squid's counters to show the client's requests", sampled, 150,
                       interval=5)
    print("squid samples:", samples)
    assert len(samples) == 1
    assert 0.3 < samples[0].hits_per_second / samples[0].requests_per_second <= 1.0
    # Only the figures' pages: the rest of the cache manager is refused from here.
    ip = pods[0]["status"]["podIP"]
    with pytest.raises(HTTPError) as refused:
        http_get(f"http://{ip}:{squid.PORT}/squid-internal-mgr/info", 2.0)
    assert refused.value.code == 403


# -- nfs ---------------------------------------------------------------------------------

NFS_CLIENT = """
command -v nfs-ls >/dev/null || exit 42
set -e
u="nfs://$SERVER/data"
# The Service's rules may reach kube-proxy a moment after the server is Ready: retry
# the first contact for up to 30 s, as a kernel mount would.
i=0
until nfs-ls "$u?version=4"; do
  i=$((i + 1)); [ "$i" -lt 15 ] || exit 1; sleep 2
done
echo "hello from $(hostname)" > /tmp/h
nfs-cp /tmp/h "$u/hello.txt?version=4"
nfs-cat "$u/hello.txt?version=4"
nfs-cp "$u/large.bin?version=4" /tmp/large.bin
sha256sum /tmp/large.bin
"""


def test_real_ganesha_serves_a_user_space_client_in_a_pod(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str) -> None:
    """The kernel here has no NFS client, so the kubelet cannot mount the export; a pod
    with Debian's libnfs (NFSv4.0, in the same image) proves the server through its
    Service instead."""
    need_image(real_node, f"{nfs.IMAGE}:{TAG}")
    name = f"n{uuid.uuid4().hex[:6]}"
    st = Storage.of({"metadata": {"name": name, "namespace": namespace, "uid": "u"},
                     "spec": {"type": "nfs", "nfs": {
                         "server": "colocated", "pool": "real",
                         "backing": {"localDisk": True}, "clients": {"pools": ["real"]}}}})
    export = Path(nfs.LOCAL_DISK_DIR) / f"{namespace}-{name}"
    try:
        for obj in place(nfs.render_nfs_server(st)):
            kubectl.apply(obj)
        kubectl("-n", namespace, "rollout", "status", f"deployment/{name}-nfs",
                "--timeout=180s")
        # A file put straight into the export directory (the real node is this host).
        large = os.urandom(20 * 2**20)
        (export / "large.bin").write_bytes(large)
        ip = json.loads(kubectl("-n", namespace, "get", "service", f"{name}-nfs", "-o",
                                "json").stdout)["spec"]["clusterIP"]
        kubectl.apply(pod_job("nfs-client", namespace, {
            "image": f"{nfs.IMAGE}:{TAG}", "command": ["/bin/sh", "-c", NFS_CLIENT],
            "env": [{"name": "SERVER", "value": ip}]}))
        try:
            wait_job(kubectl, "nfs-client", namespace, timeout=180)
        except AssertionError as e:
            if "exit code 42" in str(e) or "42" in kubectl(
                    "get", "pods", "-n", namespace, "-l", "job-name=nfs-client", "-o",
                    "jsonpath={..exitCode}", check=False).stdout.split():
                pytest.skip(f"{nfs.IMAGE}:{TAG} has no nfs-ls: rebuild it (make images)")
            server = kubectl("logs", f"deployment/{name}-nfs", "-n", namespace, "--tail=60",
                             check=False)
            raise AssertionError(f"{e}\nserver log:\n{server.stdout}{server.stderr}") from e
        out = kubectl("logs", "job/nfs-client", "-n", namespace).stdout
        print(out)
        assert "large.bin" in out and "hello from" in out
        assert hashlib.sha256(large).hexdigest() in out
        assert (export / "hello.txt").read_text().startswith("hello from")
        # reclaimPolicy Delete's last step on the node: the server gone, the rendered
        # reclaim Job removes the export directory (root-owned files in it included).
        kubectl("-n", namespace, "delete", "deployment", f"{name}-nfs", "--wait=true",
                "--timeout=60s")
        wait_for("the server pod gone", lambda: not kubectl.kube.list(
            "v1", "Pod", namespace, label_selector=f"{names.LABEL_STORAGE}={name}"), 60)
        (job,) = place([reclaim.reclaim_job(st, st.spec, NODE_NAME, 0, nfs.IMAGE)])
        kubectl.apply(job)
        wait_job(kubectl, job["metadata"]["name"], namespace, timeout=120)
        assert not export.exists() and export.parent.is_dir()
    finally:
        kubectl("-n", namespace, "delete", "deployment", f"{name}-nfs", "--wait=true",
                "--timeout=60s", check=False)
        shutil.rmtree(export, ignore_errors=True)
