"""Stage-in throughput: the runner against a single-stream download and a local disk copy.

    .venv/bin/python bench/datapath.py --size 1GiB

Against versitygw on loopback, in one run: the dataset as 64 MiB files and as 1 MiB
files; for each, (a) a local disk copy of the server's own files (the physical limit
of this machine), (b) one GET at a time, one stream per object (`aws s3 cp` without
parallelism), (c) the runner's stage-in (parallel ranged GETs, verified) with no cache,
(d) through the node cache when cold and (e) when warm (every object a hit). Reports
MB/s and ratios; writes bench/results/datapath-<time>.json. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from jobbench import results_path

from nightshift.aws import s3store as s3io
from nightshift.runner.cache import NodeCache
from nightshift.runner.config import StorageConfig
from nightshift.runner.download import StageStats, stage_s3
from tests.s3server import VersityGW

BUCKET = "bench"
UNITS = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]iB|B)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"size like 256MiB or 1GiB, got {text!r}")
    return int(m.group(1)) * UNITS[m.group(2) or ""]


def wait_for_builds() -> None:
    """Measure on a quiet machine: no Go build competing for the CPUs."""
    while subprocess.run(["pgrep", "-f", "go build"], capture_output=True,
                         check=False).returncode == 0:
        print("waiting for a running `go build` to finish ...", flush=True)
        time.sleep(30)


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("1GiB"))
    ap.add_argument("--workdir", type=Path, default=None, help="scratch (default: a temp dir)")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    wait_for_builds()
    work = Path(tempfile.mkdtemp(prefix="nightshift-bench-", dir=args.workdir))
    gw = VersityGW(work / "s3", work)
    gw.start()
    rows: list[dict[str, Any]] = []
    try:
        client = gw.client()
        client.create_bucket(Bucket=BUCKET)
        storage = StorageConfig(name="bench", kind="s3", bucket=BUCKET, endpoint=gw.endpoint,
                                access_key_env="AK", secret_key_env="SK")
        store = s3io.S3Store(storage, s3io.client(storage, {"AK": gw.access_key,
                                                            "SK": gw.secret_key}))
        for file_size in (64 * 2**20, 2**20):
            rows += bench_shape(gw, client, store, work, args.size, file_size)
    finally:
        gw.stop()
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows)
    out = results_path("datapath", args.results)
    out.write_text(json.dumps({"size": args.size, "cpus": os.cpu_count(), "rows": rows},
                              indent=1))
    print(f"\nresults: {out}")
    return 0


def bench_shape(gw: VersityGW, client: Any, store: s3io.S3Store, work: Path, total: int,
                file_size: int) -> list[dict[str, Any]]:
    n = max(1, total // file_size)
    prefix = f"set-{file_size >> 20 or 1}MiB/"
    label = f"{n} x {file_size >> 20} MiB" if file_size >= 2**20 else f"{n} x {file_size} B"
    print(f"uploading {label} ...", flush=True)

    def up(i: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}f{i:05d}", Body=os.urandom(file_size))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(up, range(n)))
    nbytes = n * file_size
    dest = work / "dest"
    results: list[dict[str, Any]] = []

    def measure(name: str, fn: Callable[[], object], extra: dict[str, Any] | None = None
                ) -> None:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        secs = timed(fn)
        results.append({"files": label, "method": name, "seconds": round(secs, 3),
                        "MBps": round(nbytes / secs / 1e6, 1), **(extra or {})})
        print(f"  {name:<28} {nbytes / secs / 1e6:9.1f} MB/s", flush=True)

    src_dir = gw.object_path(BUCKET, prefix)

    def local_copy() -> None:
        for p in sorted(src_dir.iterdir()):
            shutil.copyfile(p, dest / p.name)

    def single_stream() -> None:
        for i in range(n):
            body = client.get_object(Bucket=BUCKET, Key=f"{prefix}f{i:05d}")["Body"]
            with open(dest / f"f{i:05d}", "wb") as f:
                f.writelines(body.iter_chunks(2**20))

    def runner(cache: NodeCache | None) -> Callable[[], object]:
        return lambda: stage_s3(store, prefix, dest, cache, StageStats())

    cache = NodeCache(work / "cache", 4 * total, "bench")
    measure("local disk copy", local_copy)
    measure("single stream (1 GET/obj)", single_stream)
    measure("runner stage-in", runner(None))
    measure("runner, cache cold", runner(cache))
    hits0 = cache.stats.hits
    measure("runner, cache warm", runner(cache), {"cacheHits": cache.stats.hits - hits0})
    shutil.rmtree(work / "cache", ignore_errors=True)
    return results


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'files':<16} {'method':<28} {'MB/s':>9} {'x single':>9} {'/ local':>8}")
    by_files: dict[str, dict[str, float]] = {}
    for r in rows:
        by_files.setdefault(r["files"], {})[r["method"]] = r["MBps"]
    for r in rows:
        base = by_files[r["files"]]
        r["vsSingleStream"] = round(r["MBps"] / base["single stream (1 GET/obj)"], 2)
        r["vsLocalCopy"] = round(r["MBps"] / base["local disk copy"], 2)
        print(f"{r['files']:<16} {r['method']:<28} {r['MBps']:>9.1f} "
              f"{r['vsSingleStream']:>9.2f} {r['vsLocalCopy']:>8.2f}")


if __name__ == "__main__":
    sys.exit(main())
