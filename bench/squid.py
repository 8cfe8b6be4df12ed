"""Squid under load, in the spirit of the HEP cloud's CVMFS squids: the real squid in its
image on the local cluster's real node, with the rendered squid.conf, Deployment and
Service, in front of an HTTP origin on the host that stands in for a stratum-1
(a repository-shaped tree: a manifest, many small content-addressed objects and some
10 MB ones). Client pods on the real node fetch the whole tree through the Service,
shuffled, with many threads each; the first pass through squid is cold.

Not part of CI. Needs the real node and `make images`:

    KUBECONFIG=.localcluster/kubeconfig .venv/bin/python bench/squid.py
    ... --small 2000 --large 20 --clients 2 --threads 32 --rounds 3

After the cold pass, `--rounds` (3) pairs alternate the warm squid with the baseline, the
same clients fetching the tree straight from the origin (direct then warm, warm then
direct, ...), one client Job per run, each deleted before the next. Reports requests per
minute, bytes per second, errors and latency percentiles per run (client side),
min/median/max per side and warm/direct ratios of the medians, the origin's fetches
(each object once: collapsed forwarding and the cache), and squid's own hit ratio and
request rate from its cache manager.
Results go to bench/results/squid-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from jobbench import results_path, stats

from nightshift.api import names
from nightshift.sharedstorage import squid
from nightshift.sharedstorage.objects import Storage
from nightshift.sharedstorage.observe import SquidSampler
from tests.clusterutil import Kubectl, wait_for
from tests.integration.realstorage import REPO, RUNNER, place
from tests.integration.test_real_node import on_real_node
from tests.integration.test_sharedstorage_real import WAIT_FOR_PROXY, Origin, make_tree

CLIENT = WAIT_FOR_PROXY + """
import concurrent.futures as cf, hashlib, json, os, random, time, urllib.request
proxy, base = os.environ["PROXY"], os.environ["BASE"]
tree = json.loads(open("/tree/tree.json").read())
threads, rounds = int(os.environ["THREADS"]), int(os.environ["ROUNDS"])
# PROXY "" fetches straight from the origin: the baseline the squid rounds are put against.
if proxy:
    wait_for_proxy(proxy)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
def get(path):
    t = time.monotonic()
    try:
        with opener.open(base + path, timeout=120) as r:
            body = r.read()
        return hashlib.sha256(body).hexdigest() == tree[path], len(body), time.monotonic() - t
    except Exception:
        return False, 0, time.monotonic() - t
out = []
for rnd in range(1, rounds + 1):
    paths = list(tree)
    random.shuffle(paths)
    t0 = time.time()
    with cf.ThreadPoolExecutor(threads) as ex:
        res = list(ex.map(get, paths))
    out.append({"round": rnd, "start": t0, "end": time.time(),
                "latencies": [round(r[2], 4) for r in res],
                "errors": sum(not r[0] for r in res), "bytes": sum(r[1] for r in res)})
print(json.dumps(out))
"""


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p))] if s else 0.0


def summarize(rnd: int, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One round over every client pod: client-side rates and latency percentiles."""
    lat = [x for p in parts for x in p["latencies"]]
    secs = max(p["end"] for p in parts) - min(p["start"] for p in parts)
    nbytes = sum(p["bytes"] for p in parts)
    return {"round": rnd, "requests": len(lat), "errors": sum(p["errors"] for p in parts),
            "seconds": round(secs, 2), "requests_per_minute": round(len(lat) / secs * 60),
            "MB_per_second": round(nbytes / secs / 2**20, 1),
            "p50_ms": round(pct(lat, 0.5) * 1000, 1), "p95_ms": round(pct(lat, 0.95) * 1000, 1),
            "p99_ms": round(pct(lat, 0.99) * 1000, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=2000, help="objects of 1-4 KB")
    ap.add_argument("--large", type=int, default=20, help="objects of 10 MB")
    ap.add_argument("--clients", type=int, default=2, help="client pods")
    ap.add_argument("--threads", type=int, default=32, help="threads per client pod")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kubeconfig", default=str(ROOT / ".localcluster" / "kubeconfig"))
    args = ap.parse_args()
    kubectl = Kubectl(args.kubeconfig)
    node = json.loads(kubectl("get", "node", "nightshift-real", "-o", "json").stdout)
    gateway = next(a["address"] for a in node["status"]["addresses"]
                   if a["type"] == "InternalIP")
    ns = f"bench-squid-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", ns)
    try:
        with tempfile.TemporaryDirectory(prefix="nightshift-origin-") as d:
            tree = make_tree(Path(d), args.small, args.large)
            origin = Origin(gateway, Path(d))
            try:
                result = run(kubectl, ns, gateway, origin, tree, args)
            finally:
                origin.stop()
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
    out = results_path("squid")
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "config"}, indent=2))
    print(f"written {out}")
    return 0


def run(kubectl: Kubectl, ns: str, gateway: str, origin: Origin, tree: dict[str, str],
        args: argparse.Namespace) -> dict[str, Any]:
    upstream = f"http://{gateway}:{origin.port}/cvmfs/@fqrn@"
    st = Storage.of({"metadata": {"name": "sw", "namespace": ns, "uid": "u"},
                     "spec": {"type": "cvmfs", "cvmfs": {
                         "repositories": [REPO], "client": {"pools": ["none"]},
                         "squid": {"upstreams": [upstream], "memoryCache": "512Mi",
                                   "diskCache": "4Gi", "cpu": "500m"}}}})
    for obj in place(squid.render_squid(st, platform="local", allowed_cidrs=["10.244.0.0/16"])):
        kubectl.apply(obj)
    kubectl("-n", ns, "rollout", "status", "deployment/sw-squid", "--timeout=180s")
    # The tree's checksums in a ConfigMap (too large for an env var at thousands).
    kubectl("create", "-f", "-", input_=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tree", "namespace": ns},
        "data": {"tree.json": json.dumps(tree)}}))
    base = upstream.replace("@fqrn@", REPO)
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "clients", "namespace": ns},
           "spec": {"completions": args.clients, "parallelism": args.clients,
                    "completionMode": "Indexed", "backoffLimit": 0,
                    "template": {"spec": on_real_node({
                        "restartPolicy": "Never",
                        "volumes": [{"name": "tree", "configMap": {"name": "tree"}}],
                        "containers": [{
                            "name": "main", "image": RUNNER, "command": ["python3", "-c", CLIENT],
                            "volumeMounts": [{"name": "tree", "mountPath": "/tree"}],
                            "env": [{"name": "PROXY", "value": squid.proxy_url(st)},
                                    {"name": "BASE", "value": base},
                                    {"name": "THREADS", "value": str(args.threads)},
                                    {"name": "ROUNDS", "value": str(args.rounds)}]}]})}}}

    def clients(name: str, proxy: str, rounds: int) -> list[dict[str, Any]]:
        spec = json.loads(json.dumps(job))
        spec["metadata"]["name"] = name
        env = spec["spec"]["template"]["spec"]["containers"][0]["env"]
        env[0]["value"], env[3]["value"] = proxy, str(rounds)

        def finished() -> bool:
            status = json.loads(kubectl("-n", ns, "get", "job", name, "-o", "json").stdout
                                ).get("status", {})
            done = int(status.get("succeeded", 0)) + int(status.get("failed", 0))
            return done >= int(args.clients)

        kubectl.apply(spec)
        wait_for(f"the {name} clients to finish", finished, 1800, interval=2)
        pods = json.loads(kubectl("-n", ns, "get", "pods", "-l", f"job-name={name}", "-o",
                                  "json").stdout)["items"]
        per_pod = [json.loads(kubectl("-n", ns, "logs", p["metadata"]["name"]).stdout)
                   for p in pods]
        # Drained before the next run: the Job and its pods gone.
        kubectl("-n", ns, "delete", "job", name, "--cascade=foreground", "--timeout=120s",
                check=False)
        return [summarize(r + 1, [pp[r] for pp in per_pod]) for r in range(rounds)]

    # Cold: the first pass through squid fills its cache from the origin.
    t0 = time.time()
    origin.hits.clear()
    (cold,) = clients("cold", squid.proxy_url(st), 1)
    data = {p: n for p, n in origin.hits.items() if "/data/" in p}  # squid's fills

    def origin_total() -> int:
        return sum(n for p, n in origin.hits.items() if "/data/" in p)
    # Then warm squid against the baseline (the same clients straight to the origin),
    # alternating which goes first, one client Job each, drained between runs.
    direct: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        sides = [("direct", "", direct), ("warm", squid.proxy_url(st), warm)]
        for label, proxy, into in sides if rnd % 2 == 0 else sides[::-1]:
            before = origin_total()
            (res,) = clients(f"{label}-{rnd + 1}", proxy, 1)
            into.append({**res, "round": rnd + 1, "origin_fetches": origin_total() - before})
            print(f"round {rnd + 1} {label}: {res['requests_per_minute']} req/min, "
                  f"p50 {res['p50_ms']} ms, errors {res['errors']}", flush=True)
    wall = time.time() - t0
    spread = {name: {k: dict(zip(("min", "median", "max"),
                                 stats([float(r[k]) for r in runs]), strict=True))
                     for k in ("requests_per_minute", "p50_ms", "MB_per_second")}
              for name, runs in (("direct", direct), ("warm", warm))}
    med = {name: {k: v["median"] for k, v in per_key.items()}
           for name, per_key in spread.items()}
    squids = json.loads(kubectl("-n", ns, "get", "pods", "-l",
                                f"{names.LABEL_COMPONENT}=squid", "-o", "json").stdout)["items"]
    samples = SquidSampler().samples(ns, "sw", squids)
    req = sum(s.requests_per_second for s in samples)
    hits = sum(s.hits_per_second for s in samples)
    return {
        "config": {"small": args.small, "large": args.large, "clients": args.clients,
                   "threads": args.threads, "rounds": args.rounds,
                   "squid": {"memoryCache": "512Mi", "diskCache": "4Gi", "cpu": "500m"}},
        "objects": len(tree),
        "cold": cold, "direct": direct, "warm": warm, "min_median_max": spread,
        "wall_seconds": round(wall, 1),
        "warm_vs_direct": {
            "requests_per_minute": round(med["warm"]["requests_per_minute"] /
                                         med["direct"]["requests_per_minute"], 2),
            "p50_latency": round(med["warm"]["p50_ms"] / med["direct"]["p50_ms"], 2)
            if med["direct"]["p50_ms"] else None},
        # The cold pass's fetches (each object once: collapsed forwarding) and the warm
        # runs' (none when everything stayed cached); the direct runs fetch all of them.
        "origin_fetches": {"objects": len(data), "max_per_object": max(data.values(), default=0),
                           "total": sum(data.values()),
                           "during_warm_runs": sum(r["origin_fetches"] for r in warm)},
        "squid_cache_manager": {"requests_per_minute": round(req * 60, 1),
                                "hit_ratio": round(hits / req, 4) if req else None},
    }


if __name__ == "__main__":
    raise SystemExit(main())
