"""The Pegasus storage comparison, small: Montage-like and Broadband-like I/O through
GlusterFS (distribute and NUFA) and S3 with the runner's node cache, against local disk.

    .venv/bin/python bench/storage.py                  # as root (glusterd, FUSE mounts)
    .venv/bin/python bench/storage.py --tasks 8 --files 300 --inputs 20

Where it runs: on this host, whose kernel and disk are the local cluster's real node,
outside pods (the pod-level path is tests/integration/test_sharedstorage_real.py).
GlusterFS is Debian's glusterd 10 (`apt-get install glusterfs-server`), one server with
two bricks, its volume made by the script the operator's volume Job runs
(sharedstorage/glustervolume.py) through glusterd's socket in a private /run, and
FUSE-mounted as the client DaemonSet mounts it. S3 is versitygw on loopback, read by
the runner's own stage-in (parallel GETs, verified) through its node cache
(runner/cache.py). NFS is not here: this kernel has no NFS client (docs/sharedstorage.md).

- Montage-like (many small files): `--tasks` workers each write `--files` files of
  10-100 KB, then each reads the files another task wrote.
- Broadband-like (reuse): `--inputs` files of 2 MB that every task reads.
- `--brick-kill`: a brick process killed mid-write, and what the writer sees.

Timings are wall seconds of each phase with `--tasks` workers in parallel. Every side is
set up from nothing for each run (a fresh volume, gateway and cache) and torn down after;
between runs the page cache is written back and dropped. `--rounds` (3) runs every side
once per round, the order rotated each round; the result gives min/median/max per phase
and ratios of medians against local disk. Results go to
bench/results/storage-<time>.json. Not part of CI; numbers from a shared 2-CPU machine
are only ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from jobbench import results_path, stats

from nightshift.aws import s3store as s3io
from nightshift.runner.cache import NodeCache
from nightshift.runner.config import StorageConfig
from nightshift.runner.download import StageStats, stage_s3
from nightshift.sharedstorage import gluster, glustervolume
from nightshift.sharedstorage.objects import Storage
from tests.s3server import VersityGW

BUCKET = "bench"


def host_ip() -> str:
    """An address of this host that is not loopback (glusterd refuses localhost bricks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        return str(s.getsockname()[0])


class GlusterVolume:
    """glusterd with its own /run, state and bricks (a private mount namespace, as in
    its pod), the volume made by the rendered Job's script, mounted with FUSE."""

    def __init__(self, work: Path, layout: str) -> None:
        self.work = work
        self.name = f"bench{layout[:4]}{os.getpid()}"
        self.layout = layout
        for d in ("run", "state", "log", "bricks", "mnt"):
            (work / d).mkdir(parents=True, exist_ok=True)
        self.mnt = work / "mnt"
        self.proc: subprocess.Popen[bytes] | None = None

    def _ns(self, inner: str) -> list[str]:
        w = self.work
        return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                f"mount --bind {w}/run /run && {inner}"]

    def start(self) -> None:
        w = self.work
        self.proc = subprocess.Popen(self._ns(
            f"mount --bind {w}/state /var/lib/glusterd && mount --bind {w}/log "
            f"/var/log/glusterfs && mkdir -p /bricks && mount --bind {w}/bricks /bricks && "
            "mkdir -p /bricks/brick0 /bricks/brick1 && exec glusterd -N "
            "--log-file=/dev/null"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        st = Storage.of({"metadata": {"name": self.name, "namespace": "bench", "uid": "u"},
                         "spec": {"type": "glusterfs", "glusterfs": {
                             "layout": self.layout, "pool": "p", "servers": 1,
                             "bricksPerNode": 2, "clients": {"pools": ["p"]}}}})
        pod = gluster.ServerPod(f"{self.name}-gluster-0", host_ip(), True, "here")
        job = glustervolume.volume_job(st, [pod])
        assert job is not None
        script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        subprocess.run(self._ns(script), check=True, capture_output=True, timeout=120)
        subprocess.run(["mount", "-t", "glusterfs", f"{host_ip()}:/{self.name}",
                        str(self.mnt)], check=True, timeout=60)

    def stop(self) -> None:
        subprocess.run(["umount", "-l", str(self.mnt)], check=False)
        # The brick processes glusterd started for this volume, by its unique name.
        subprocess.run(["pkill", "-f", "--", f"--volfile-id {self.name}."], check=False)
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)

    def data_per_brick(self) -> list[int]:
        out = []
        for b in (0, 1):
            root = self.work / "bricks" / f"brick{b}"
            out.append(sum(1 for p in root.rglob("*") if p.is_file() and ".glusterfs" not in
                           p.parts and p.stat().st_size > 0))
        return out


class FileTarget:
    """A directory (local disk, or a FUSE mount)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, rel: str, data: bytes) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def read_prefix(self, prefix: str, scratch: Path) -> int:
        n = 0
        for p in sorted((self.root / prefix).rglob("*")):
            if p.is_file():
                n += len(p.read_bytes())
        return n


class S3Target:
    """versitygw through the runner: puts as its commit does, reads by its stage-in
    through the node cache (one cache for the host, as one per node)."""

    def __init__(self, gw: VersityGW, cache_dir: Path) -> None:
        storage = StorageConfig(name="bench", kind="s3", bucket=BUCKET, endpoint=gw.endpoint,
                                access_key_env="AK", secret_key_env="SK")
        self.store = s3io.S3Store(storage, s3io.client(storage, {
            "AK": gw.access_key, "SK": gw.secret_key}))
        self.client = gw.client()
        self.cache = NodeCache(cache_dir, 8 * 2**30, "bench")

    def write(self, rel: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=rel, Body=data)

    def read_prefix(self, prefix: str, scratch: Path) -> int:
        dest = scratch / f"{random.getrandbits(64):x}"
        stats = StageStats()
        stage_s3(self.store, prefix.rstrip("/") + "/", dest, self.cache, stats)
        n = sum(len(p.read_bytes()) for p in dest.rglob("*") if p.is_file())
        shutil.rmtree(dest, ignore_errors=True)
        return n


Target = FileTarget | S3Target


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def workloads(target: Target, scratch: Path, args: argparse.Namespace,
              label: str) -> dict[str, Any]:
    rng = random.Random(7)  # noqa: S311 - sizes, not secrets
    small = {t: [os.urandom(rng.randint(10_000, 100_000)) for _ in range(args.files)]
             for t in range(args.tasks)}
    inputs = [os.urandom(2 * 2**20) for _ in range(args.inputs)]
    pool = ThreadPoolExecutor(args.tasks)

    def write_task(t: int) -> None:
        for i, data in enumerate(small[t]):
            target.write(f"{label}/montage/t{t}/f{i}", data)

    def read_task(t: int) -> int:
        return target.read_prefix(f"{label}/montage/t{(t + 1) % args.tasks}", scratch)

    for i, data in enumerate(inputs):
        target.write(f"{label}/broadband/in{i}", data)

    def reuse_task(t: int) -> int:
        return target.read_prefix(f"{label}/broadband", scratch)

    out = {
        "montage_write_s": timed(lambda: list(pool.map(write_task, range(args.tasks)))),
        "montage_read_s": timed(lambda: list(pool.map(read_task, range(args.tasks)))),
        "broadband_read_s": timed(lambda: list(pool.map(reuse_task, range(args.tasks)))),
    }
    pool.shutdown()
    return {k: round(v, 3) for k, v in out.items()}


def brick_kill(work: Path) -> dict[str, Any]:
    """A writer creating 50 KB files on a distribute volume of two bricks; one brick's
    process killed (SIGKILL) mid-write, then restarted as glusterd does for a started
    volume (`volume start force`, what a restarted server pod's glusterd does at boot)."""
    vol = GlusterVolume(work, "distribute")
    vol.start()
    d = vol.mnt / "w"
    d.mkdir()
    ok, errors = [0], [0]
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            try:
                (d / f"f{i}").write_bytes(os.urandom(50_000))
                ok[0] += 1
            except OSError:
                errors[0] += 1
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(3)
        before = ok[0]
        pids = subprocess.run(["pgrep", "-f", "--", f"--volfile-id {vol.name}.*bricks-brick1"],
                              capture_output=True, text=True, check=False).stdout.split()
        subprocess.run(["kill", "-9", *pids], check=True)
        ok0 = ok[0]
        time.sleep(4)
        during = {"ok": ok[0] - ok0, "failed": errors[0]}
        subprocess.run(vol._ns(f"gluster --mode=script volume start {vol.name} force"),
                       check=True, capture_output=True)
        t0, err0, last = time.monotonic(), errors[0], None
        seen = errors[0]
        while time.monotonic() - t0 < 20:
            if errors[0] != seen:
                seen, last = errors[0], time.monotonic() - t0
            time.sleep(0.1)
        stop.set()
        t.join()
        unreadable = 0
        for p in d.iterdir():
            try:
                p.read_bytes()
            except OSError:
                unreadable += 1
        return {"written_before_kill_3s": before, "4s_after_kill": during,
                "failed_after_restart": errors[0] - err0,
                "last_failure_s_after_restart": round(last, 2) if last else 0.0,
                "files": sum(1 for _ in d.iterdir()), "unreadable": unreadable}
    finally:
        stop.set()
        t.join()
        vol.stop()


SIDES = ("local disk", "gluster distribute", "gluster nufa", "s3 + node cache")
PHASES = ("montage_write_s", "montage_read_s", "broadband_read_s")


@contextmanager
def side(name: str, work: Path) -> Iterator[tuple[Target, Callable[[], dict[str, Any]]]]:
    """One side set up from nothing (a fresh volume, gateway or cache), torn down after:
    the target and what to record about it once its workloads ran."""
    root = work / name.replace(" ", "-")
    if name == "local disk":
        yield FileTarget(root), dict
    elif name.startswith("gluster"):
        vol = GlusterVolume(root, name.split()[1])
        try:
            vol.start()
            yield FileTarget(vol.mnt), lambda: {"data_files_per_brick": vol.data_per_brick()}
        finally:
            vol.stop()
    else:
        gw = VersityGW(root / "s3", root)
        gw.start()
        try:
            gw.client().create_bucket(Bucket=BUCKET)
            target = S3Target(gw, root / "cache")
            yield target, lambda: {"cache": {"hits": target.cache.stats.hits,
                                             "misses": target.cache.stats.misses}}
        finally:
            gw.stop()
    shutil.rmtree(root, ignore_errors=True)


def settle() -> None:
    """Between sides: the last side's dirty pages written back and the page cache
    dropped, so no side pays for or profits from the one before it."""
    os.sync()
    with suppress(OSError):  # not permitted here: the sync alone
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    time.sleep(2)


def order(rnd: int) -> list[str]:
    """Round r starts at side r: over four rounds each side runs once in each place."""
    return [SIDES[(rnd + i) % len(SIDES)] for i in range(len(SIDES))]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": runs}
    for k in PHASES:
        lo, med, hi = stats([r[k] for r in runs])
        out[k] = {"min": lo, "median": round(med, 3), "max": hi}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--files", type=int, default=300, help="Montage-like files per task")
    ap.add_argument("--inputs", type=int, default=20, help="Broadband-like 2 MB inputs")
    ap.add_argument("--rounds", type=int, default=3,
                    help="every side once per round, the order rotated each round")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--brick-kill", action="store_true",
                    help="only: kill a brick mid-write and restart it (brick_kill)")
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("glusterd"):
        print("needs root and glusterd (apt-get install glusterfs-server glusterfs-client)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="nightshift-storage-bench-"))
    if args.brick_kill:
        try:
            print(json.dumps(brick_kill(work / "brick-kill"), indent=1))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SIDES}
    load = os.getloadavg()[0]
    try:
        for rnd in range(args.rounds):
            for name in order(rnd):
                settle()
                with side(name, work) as (target, extra):
                    row = workloads(target, work / "scratch", args, f"r{rnd}")
                    row.update(extra(), round=rnd + 1, load=round(os.getloadavg()[0], 1))
                runs[name].append(row)
                print(f"round {rnd + 1} {name}: " + ", ".join(
                    f"{k} {row[k]}" for k in PHASES), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = {name: summary(r) for name, r in runs.items()}
    base = rows["local disk"]
    for row in rows.values():
        for k in PHASES:
            b = base[k]["median"]
            row[k.replace("_s", "_x_local")] = round(row[k]["median"] / b, 1) if b else None
    result = {"tasks": args.tasks, "files": args.files, "inputs": args.inputs,
              "rounds": args.rounds, "cpus": os.cpu_count(), "load_at_start": round(load, 1),
              "rows": rows}
    print(json.dumps({n: {k: v for k, v in r.items() if k != "runs"} for n, r in rows.items()},
                     indent=1))
    out = results_path("storage", args.results)
    out.write_text(json.dumps(result, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
