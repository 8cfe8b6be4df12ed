"""CPU profiles of the control plane's parts over the same window of every timed run.

Where a run's CPU goes, part by part, is what tells a cost per pod from the bed's noise:
`--profile 30:120` takes a 120-s CPU profile (Go's `/debug/pprof/profile`) of the API
server, controller-manager and scheduler, starting 30 s after the run's create call, in
every run of a set, so both sides of a pair are sampled over the same stretch
of their lives. Profiling samples at 100 Hz and costs each part about 1 % of its CPU,
the same on both sides.

The API server serves `/debug/pprof` only when the cluster was started with
`nightshift-localcluster up --profiling`; the controller-manager and scheduler serve it
on their secure ports (the admin's token, authorized by the API server). KWOK v0.8.0
cannot be profiled this way: its server registers only `pprof.Index`
(`pkg/kwok/server/profiling.go`), which serves the runtime's named profiles (heap,
goroutine) and answers 404 for `profile`, the CPU profile; its CPU seconds per run are
in every run's record all the same. A part that refuses is recorded with its error, not
skipped in silence.

Read a pair with Go's own tool, e.g. where the PipelineRun's API server spent more:
    go tool pprof -top -cum -diff_base=<bare>.pprof <run>.pprof
"""

from __future__ import annotations

import json
import re
import ssl
import statistics
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from auditlog import pod_work, ts
from hostspeed import HostSpeed

# state.json's process name -> its ports key, and whether it serves HTTPS (all do now;
# the flag keeps the token off any plain-HTTP part added later).
PARTS = {
    "kube-apiserver": ("apiserver", True),
    "kube-controller-manager": ("controller_manager", True),
    "kube-scheduler": ("scheduler", True),
}


@dataclass(frozen=True)
class Window:
    delay_s: float
    seconds: int

    @classmethod
    def parse(cls, text: str) -> Window:
        """"DELAY:SECONDS", e.g. "30:120"."""
        try:
            delay, seconds = text.split(":")
            w = cls(float(delay), int(seconds))
        except ValueError as e:
            raise ValueError(f"--profile {text!r}: expected DELAY:SECONDS, e.g. 30:120") from e
        if w.delay_s < 0 or w.seconds < 1:
            raise ValueError(f"--profile {text!r}: the delay must be >= 0 and seconds >= 1")
        return w


def endpoints(state: dict[str, Any]) -> dict[str, str]:
    """Each part's profile URL (without the query) from the cluster's state.json."""
    out = {}
    for part, (port_key, https) in PARTS.items():
        port = state["ports"][port_key]
        out[part] = f"{'https' if https else 'http'}://127.0.0.1:{port}/debug/pprof/profile"
    return out


def admin_auth(kubeconfig: Path) -> tuple[str, str]:
    """The admin's token and the cluster CA's file, from the local cluster's kubeconfig."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    return (cfg["users"][0]["user"]["token"],
            cfg["clusters"][0]["cluster"]["certificate-authority"])


@dataclass
class Profiles:
    """One run's profiles: start() at the create call, finish() once the run is done."""

    window: Window
    urls: dict[str, str]
    token: str
    ca_file: str
    out_prefix: Path
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    t0: float = 0.0

    def start(self, t0: float) -> None:
        self.t0 = t0
        for part, url in self.urls.items():
            th = threading.Thread(target=self._take, args=(part, url), daemon=True)
            th.start()
            self.threads.append(th)

    def _take(self, part: str, url: str) -> None:
        if self.stop.wait(max(0.0, self.t0 + self.window.delay_s - time.time())):
            self.results[part] = {"error": "the run ended before the window began"}
            return
        started = time.time()
        # The API server's CA signs its certificate; the controller-manager's and
        # scheduler's are self-signed at start, on loopback only.
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if part != "kube-apiserver":
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        https = url.startswith("https")
        # A plain-HTTP server gets no token.
        headers = {"Authorization": f"Bearer {self.token}"} if https else {}
        # Loopback URLs built by endpoints(), http or https only.
        req = urllib.request.Request(f"{url}?seconds={self.window.seconds}",  # noqa: S310
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.window.seconds + 60,  # noqa: S310
                                        context=ctx if https else None) as r:
                data = r.read()
        except OSError as e:
            self.results[part] = {"error": f"{url}: {e}"}
            return
        path = self.out_prefix.with_name(f"{self.out_prefix.name}-{part}.pprof")
        path.write_bytes(data)
        self.results[part] = {"file": path.name, "from_s": round(started - self.t0, 2),
                              "to_s": round(time.time() - self.t0, 2)}

    def finish(self) -> dict[str, dict[str, Any]]:
        """Cancel windows not yet begun and wait for those under way: a run that ends
        inside its window still gets the whole window, its drain's start included."""
        self.stop.set()
        for th in self.threads:
            th.join(self.window.seconds + 90)
        return dict(sorted(self.results.items()))


class Beside:
    """The probe and profiles of one timed run. As a context, it never outlives the run:
    a run that raises still stops the probe and removes its file."""

    def __init__(self, speed: HostSpeed, profiles: Profiles | None) -> None:
        self.speed = speed
        self.profiles = profiles
        self.result: dict[str, Any] | None = None

    def __enter__(self) -> Beside:
        self.speed.start()
        if self.profiles is not None:
            self.profiles.start(time.time())
        return self

    def finish(self) -> dict[str, Any]:
        """The host's speed meanwhile and, with profiles, where each part's file is."""
        if self.result is None:
            self.result = self.speed.stop()
            if self.profiles is not None:
                self.result["profiles"] = self.profiles.finish()
        return self.result

    def __exit__(self, *exc: object) -> None:
        self.finish()


def profiles_for(layout: Any, window: Window, out_prefix: Path) -> Profiles:
    state = json.loads((layout.state / "state.json").read_text())
    token, ca = admin_auth(layout.kubeconfig)
    return Profiles(window=window, urls=endpoints(state), token=token, ca_file=ca,
                    out_prefix=out_prefix)


def note_window_work(host: dict[str, Any], entries: list[dict[str, Any]], namespace: str,
                     t0: float) -> None:
    """Beside each profile, the pod writes the run made within its window (audit log):
    the work it sampled. Two runs' windows compare per write, not per second, since both
    cores are busy in every window and only the work done in it differs."""
    for res in (host.get("profiles") or {}).values():
        if "from_s" in res:
            res["t0"] = round(t0, 3)
            lo, hi = t0 + res["from_s"], t0 + res["to_s"]
            work = pod_work([e for e in entries if lo <= ts(e) <= hi], namespace)
            res["pod_writes"] = work
            res["pods_created"] = work.get("create pod", 0)


_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "mins": 6e4, "hrs": 3.6e6}


def _ms(text: str) -> float:
    num = text.rstrip("abcdefghijklmnopqrstuvwxyzµ")
    return float(num) * _UNIT_MS[text[len(num):]]


def top_cum(path: Path, nodes: int = 500) -> tuple[float, dict[str, float]]:
    """A profile's total CPU ms, and each function's cumulative ms (`go tool pprof`)."""
    out = subprocess.run(["go", "tool", "pprof", "-top", "-cum", f"-nodecount={nodes}",
                          str(path)], capture_output=True, text=True, check=True).stdout
    return parse_top(out)


def parse_top(out: str) -> tuple[float, dict[str, float]]:
    """`go tool pprof -top -cum`'s text: the total, and each listed function's cum."""
    m = re.search(r"Total samples = (\S+)", out)
    if m is None:
        raise ValueError("not `go tool pprof -top` output: no 'Total samples' line")
    cum = {}
    for line in out.splitlines():
        cols = line.split(maxsplit=5)
        if len(cols) == 6 and cols[1].endswith("%") and cols[4].endswith("%"):
            cum[cols[5]] = _ms(cols[3])
    return _ms(m.group(1)), cum


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each key's median over the rows (0 where a row lacks it)."""
    return {k: statistics.median(r.get(k, 0.0) for r in rows) for k in set().union(*rows)}


def cpu_per_write(runs: list[dict[str, Any]], key: str = "side") -> dict[str, dict[str, float]]:
    """Each part's CPU over the whole run per pod write, host-adjusted (µs per write per
    chunk-ms of bench/hostspeed.py): the median per `key` (a fan-out's side, an
    ablation's variant). Same work, same cores: a part that costs more here costs more
    per write, whatever the run's pace."""
    rows: dict[str, list[dict[str, float]]] = {}
    for r in runs:
        writes = sum(v for k, v in r["pod_work"].items() if k != "conflict")
        chunk = (r.get("host") or {}).get("chunk_ms")
        if writes and chunk:
            rows.setdefault(r[key], []).append({p: 1e6 * cpu / writes / chunk
                                                for p, cpu in r["cpu_s"].items()})
    return {k: {p: round(v, 1) for p, v in sorted(_medians(xs).items())}
            for k, xs in rows.items()}


def parts_total(per_part: dict[str, float]) -> float:
    """The cluster's parts together, less "other" (everything else on the machine)."""
    return sum(v for p, v in per_part.items() if p != "other")


def baseline_name(size: dict[str, Any]) -> str:
    """What the "bare" side ran: the bare Job, or with `--baseline full` the run's own Job
    (the side keeps its key, "bare", in the results)."""
    return str(size.get("baseline", "bare"))  # sets before --baseline existed: bare


def print_cpu_per_write(size: dict[str, Any]) -> None:
    per = cpu_per_write(size["runs"])
    if set(per) != {"bare", "run"}:
        return
    base = baseline_name(size)
    print(f"\n== {size['items']:,} items, every part over the whole run: µs per pod write "
          f"per chunk-ms, median ({base} Job against the PipelineRun)")
    total = {s: parts_total(per[s]) for s in per}
    for p in per["bare"]:
        b, r = per["bare"][p], per["run"].get(p, 0.0)
        share = 100 * (r - b) / (total["run"] - total["bare"])
        print(f"  {p:24} {base} {b:7.1f}  run {r:7.1f}  {r - b:+7.1f}  "
              f"({share:5.1f} % of the parts' difference)")
    print(f"  {'all parts (not other)':24} {base} {total['bare']:7.1f}  "
          f"run {total['run']:7.1f}  {base} / run {total['bare'] / total['run']:.3f}")


def summarize(result: Path, top: int = 12) -> None:
    """Per part: each run's CPU in its window per pod write made in it, and the functions
    whose cumulative CPU per write grew most from the bare Job's median to the
    PipelineRun's (`go tool pprof -diff_base` shows the same per second, not per write)."""
    data = json.loads(result.read_text())
    for size in data["results"]:
        print_cpu_per_write(size)
        runs = [r for r in size["runs"] if (r.get("host") or {}).get("profiles")]
        parts = sorted({p for r in runs for p in r["host"]["profiles"]})
        for part in parts:
            print(f"\n== {size['items']:,} items, {part}: CPU in the window, per pod write")
            per_write: dict[str, list[dict[str, float]]] = {"bare": [], "run": []}
            for r in runs:
                res = r["host"]["profiles"][part]
                writes = sum((res.get("pod_writes") or {}).values())
                if "file" not in res or not writes:
                    print(f"  pair {r['pair']} {r['side']:4}  {res.get('error', 'no writes')}")
                    continue
                total, cum = top_cum(result.parent / res["file"])
                print(f"  pair {r['pair']} {r['side']:4}  {total / 1000:6.1f} CPU s  "
                      f"{writes:6} pod writes ({res['pods_created']} creates)  "
                      f"{total / writes:6.3f} ms/write")
                per_write[r["side"]].append({f: v / writes for f, v in cum.items()}
                                            | {"": total / writes})
            if not per_write["bare"] or not per_write["run"]:
                continue
            med = {side: _medians(rows) for side, rows in per_write.items()}
            print(f"  median ms/write: {baseline_name(size)} {med['bare']['']:.3f}, "
                  f"run {med['run']['']:.3f}")
            grew = sorted(((med["run"].get(f, 0.0) - med["bare"].get(f, 0.0), f)
                           for f in set(med["run"]) | set(med["bare"]) if f), reverse=True)
            for d, f in grew[:top]:
                print(f"  {d:+7.4f} ms/write  {med['bare'].get(f, 0.0):6.4f} -> "
                      f"{med['run'].get(f, 0.0):6.4f}  {f[:100]}")


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/profiles.py bench/results/fanout-<time>.json")
    summarize(Path(sys.argv[1]))
