"""Pure formatting for `kubectl nightshift status`, `watch` and `cost`.

Input is the PipelineRun object as read (one GET); output is a JSON-able summary or a
rich renderable. Nothing here reads the API, so a 100,000-item status renders in the
same few milliseconds as a 10-item one: the status itself stays a few KB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nightshift.api import conditions as cond
from nightshift.api import ranges
from nightshift.pipelinerun.spec import TERMINAL_PHASES

BAR_WIDTH = 24
# (summary key, bar character, style), in bar order; the characters differ so the bar
# still reads without colour (piped, NO_COLOR).
SEGMENTS = (("succeeded", "█", "green"), ("failed", "▓", "red"),
            ("running", "▒", "yellow"), ("pending", "░", "grey50"))
PHASE_STYLE = {"Succeeded": "bold green", "Failed": "bold red", "Running": "bold yellow",
               "Suspended": "bold magenta", "Cancelled": "bold magenta", "Pending": "bold"}
# Conditions whose healthy value is False; for the others (Ready, Progressing) it is True.
HEALTHY_FALSE = {cond.FAILED, cond.INVALID, cond.CAPACITY_LIMITED, cond.RECONCILE_ERROR}
# Progressing=False and Ready=False are expected once a run stops, for whichever reason
# its phase already says; only other reasons (ItemsUnresolved, ...) are news.
PHASES = {"Pending", "Running", "Succeeded", "Failed", "Suspended", "Cancelled"}


def stage_summary(rec: Mapping[str, Any]) -> dict[str, Any]:
    total = int(rec.get("total") or 0)
    done = int(rec.get("succeeded") or 0)
    failed = int(rec.get("failed") or 0)
    running = int(rec.get("running") or 0)
    out: dict[str, Any] = {
        "name": rec.get("name"), "phase": rec.get("phase") or "Pending",
        "total": total, "succeeded": done, "failed": failed, "running": running,
        "pending": max(0, total - done - failed - running),
    }
    for key in ("attempt", "jobName", "parallelism", "failedItems", "failedItemsTruncated",
                "failureSamples", "reason", "message", "waiting", "startTime",
                "completionTime"):
        if rec.get(key) not in (None, "", []):
            out[key] = rec[key]
    return out


def not_ok(conditions: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The conditions a person should read: each one off its healthy value, except the
    Ready/Progressing=False that merely restate the phase."""
    out = []
    for c in conditions or []:
        t, s, reason = c.get("type"), c.get("status"), c.get("reason") or ""
        if s == cond.UNKNOWN:
            bad = True
        elif t in HEALTHY_FALSE:
            bad = s == cond.TRUE
        else:
            bad = s == cond.FALSE and reason not in PHASES
        if bad:
            out.append({k: c[k] for k in ("type", "status", "reason", "message") if k in c})
    return out


def summary(run: Mapping[str, Any]) -> dict[str, Any]:
    """The machine-readable `status -o json`: counters per stage, what failed, why."""
    meta = run.get("metadata") or {}
    st = run.get("status") or {}
    spec = run.get("spec") or {}
    gen = meta.get("generation")
    out: dict[str, Any] = {
        "name": meta.get("name"), "namespace": meta.get("namespace"),
        "phase": st.get("phase") or "Pending",
        "terminal": (st.get("phase") or "") in TERMINAL_PHASES,
        "progress": st.get("progress") or "0/0",
        "total": int(st.get("total") or 0), "succeeded": int(st.get("succeeded") or 0),
        "failed": int(st.get("failed") or 0),
        "stages": [stage_summary(r) for r in st.get("stages") or []],
        "conditions": not_ok(st.get("conditions")),
        "cost": st.get("cost"),
        "spec": {k: spec[k] for k in ("suspend", "cancel", "rerunFailed") if k in spec},
        # The operator has not yet seen the latest spec change (suspend, rerunFailed...).
        "stale": gen is not None and st.get("observedGeneration") != gen,
    }
    for key in ("startTime", "completionTime", "rerunFailed"):
        if st.get(key) is not None:
            out[key] = st[key]
    known = {s["name"] for s in out["stages"]}
    # Stages the operator has not recorded yet (a run just created) still show.
    for s in spec.get("stages") or []:
        if s.get("name") not in known:
            out["stages"].append(stage_summary({"name": s.get("name")}))
    return out


def bar(s: Mapping[str, Any], width: int = BAR_WIDTH) -> Text:
    """A stacked bar: done, failed, running, pending, each at least one cell when
    non-zero, so one failure among 100,000 items still shows."""
    total = int(s.get("total") or 0)
    text = Text()
    if total <= 0:
        return text.append("·" * width, style="grey35")
    counts = [max(0, int(s.get(k) or 0)) for k, _, _ in SEGMENTS]
    cells = [(c * width) // total for c in counts]
    for i, c in enumerate(counts):
        if c and not cells[i]:
            cells[i] = 1
    # Hand out the rounding remainder at the largest part; take back the minimums from
    # the widest part, or when the bar is narrower than the parts, pending goes first
    # and failed last.
    while sum(cells) < width:
        cells[max(range(len(cells)), key=lambda i: counts[i])] += 1
    while sum(cells) > width:
        wide = [i for i in range(len(cells)) if cells[i] > 1]
        i = max(wide, key=lambda i: cells[i]) if wide else next(
            i for i in (3, 2, 0, 1) if cells[i])
        cells[i] -= 1
    for (_, ch, style), n in zip(SEGMENTS, cells, strict=True):
        text.append(ch * n, style=style)
    return text


# Seconds a client's clock may run behind the API server's and still read "0s ago".
CLOCK_SKEW = 60


def _since(stamp: str, now: datetime | None) -> str:
    """"started 5m02s ago"; the stamp itself where the time cannot be read or lies
    ahead by more than clock skew explains."""
    try:
        t = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return f"started {stamp}"
    secs = int(((now or datetime.now(UTC)) - t).total_seconds())
    if secs < -CLOCK_SKEW:
        return f"started {stamp}"
    return f"started {_duration(max(secs, 0))} ago"


def _duration(secs: int) -> str:
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    if d:
        return f"{d}d{h:02d}h"
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _n(x: int) -> str:
    return f"{x:,}"


def status_view(s: Mapping[str, Any], now: datetime | None = None,
                width: int | None = None) -> RenderableType:
    """The human `status`: one line for the run, a bar per stage, then what went wrong.

    `width` (the terminal's) shrinks the bars first, so the counts stay readable."""
    longest = max([len(str(st["name"])) for st in s["stages"]] + [5])
    bar_width = BAR_WIDTH if width is None else max(6, min(BAR_WIDTH, width - 72 - longest))
    phase = str(s["phase"])
    head = Text.assemble(
        ("PipelineRun ", "bold"), (f"{s['namespace']}/{s['name']}", "bold cyan"), "  ",
        (phase, PHASE_STYLE.get(phase, "bold")),
        f"  {_n(s['succeeded'])}/{_n(s['total'])} items done")
    if s.get("startTime"):
        if s.get("completionTime"):
            head.append(f"  ran {s['startTime']} → {s['completionTime']}")
        else:
            head.append(f"  {_since(str(s['startTime']), now)}")
    if s.get("stale"):
        head.append("  (spec changed; the operator has not caught up yet)", style="italic")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (("STAGE", "left"), ("PHASE", "left"), ("PROGRESS", "left"),
                         ("DONE", "right"), ("FAILED", "right"), ("RUNNING", "right"),
                         ("PENDING", "right"), ("TOTAL", "right"), ("ATTEMPT", "right")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for st in s["stages"]:
        known = st["total"] > 0
        table.add_row(
            str(st["name"]), Text(str(st["phase"]), style=PHASE_STYLE.get(st["phase"], "")),
            bar(st, bar_width), _n(st["succeeded"]),
            Text(_n(st["failed"]), style="red" if st["failed"] else ""),
            _n(st["running"]), _n(st["pending"]) if known else "-",
            _n(st["total"]) if known else "-", str(st.get("attempt", "-")))
    parts: list[RenderableType] = [head, table]
    waits = [st for st in s["stages"] if st.get("waiting")]
    if waits:
        parts.append(Text("pods not starting:", style="bold yellow"))
        parts.extend(Text(f"  {st['waiting']}") for st in waits)
    failures = failure_lines(s)
    if failures:
        parts.append(Text("failed items:", style="bold red"))
        parts.extend(failures)
    bad = s.get("conditions") or []
    if bad:
        parts.append(Text("conditions:", style="bold"))
        for c in bad:
            parts.append(Text(f"  {c['type']}={c['status']} {c.get('reason', '')}: "
                              f"{c.get('message', '')}"))
    if s.get("cost"):
        c = cost_summary(s["cost"])
        if c.get("total") is not None:
            unpriced = (" +? (pod time on a pool with no known price)"
                        if any(st.get("unpricedHours") for st in c["stages"]) else "")
            parts.append(Text(f"cost: ${c['total']:,.2f}{unpriced} (per stage: kubectl "
                              f"nightshift cost {s['name']})"))
    return Group(*parts)


def failure_lines(s: Mapping[str, Any], max_ranges: int = 120) -> list[Text]:
    out: list[Text] = []
    for st in s["stages"]:
        if not st["failed"] and not st.get("reason"):
            continue
        text = Text(f"  {st['name']}: ", style="bold", no_wrap=True, overflow="ellipsis")
        text.append(f"{_n(st['failed'])} failed")
        if st.get("reason"):
            text.append(f" ({st['reason']})")
        items = st.get("failedItems") or ""
        if items:
            shown = ranges.truncate(items, max_ranges)[0]
            more = shown != items or st.get("failedItemsTruncated")
            text.append(f", indexes {shown}{' …' if more else ''}")
        out.append(text)
        for smp in st.get("failureSamples") or []:
            line = f"    #{smp.get('index')}"
            if smp.get("item"):
                line += f" {smp['item']}"
            if smp.get("exitCode") is not None:
                line += f" exit {smp['exitCode']}"
            if smp.get("reason"):
                line += f" {smp['reason']}"
            if smp.get("message"):
                line += f": {smp['message']}"
            out.append(Text(line, style="red", no_wrap=True, overflow="ellipsis"))
        if st["failed"]:
            out.append(Text(f"    all: kubectl nightshift items {s['name']} --stage "
                            f"{st['name']} --failed", style="dim"))
    return out


# -- cost -------------------------------------------------------------------------------
# status.cost as pipelinerun/cost.py writes it (docs/cost.md).


def _usd(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def cost_summary(cost: Mapping[str, Any] | None) -> dict[str, Any]:
    """{total, used, idle, node, billing, observedAt, stages: [{name, usd, podHours,
    running, unpricedHours?}]} from status.cost. A stage's pod time on a pool without a
    known price is unpricedHours: its usd is then a lower bound (None when none of it
    is priced), never a confident figure."""
    cost = cost or {}
    stages = []
    for st in cost.get("stages") or []:
        if not isinstance(st, Mapping):
            continue
        pod_s = float(st.get("podSeconds") or 0)
        unpriced = max(0.0, pod_s - float(st.get("pricedSeconds", pod_s) or 0))
        row: dict[str, Any] = {
            "name": st.get("name"),
            "usd": None if pod_s > 0 and unpriced >= pod_s else _usd(st.get("usedUSD")),
            "podHours": round(pod_s / 3600, 4), "running": int(st.get("running") or 0)}
        if unpriced > 0:
            row["unpricedHours"] = round(unpriced / 3600, 4)
        stages.append(row)
    return {
        "total": _usd(cost.get("totalUSD")), "used": _usd(cost.get("usedUSD")),
        "idle": _usd(cost.get("idleUSD")), "node": _usd(cost.get("nodeUSD")),
        "billing": cost.get("billing"), "observedAt": cost.get("observedAt"),
        "stages": stages,
    }


def cost_view(name: str, cost: Mapping[str, Any] | None) -> RenderableType:
    if not cost:
        return Text(f"PipelineRun {name}: cost is not recorded (the run names no "
                    "VirtualCluster, or its VirtualCluster has no prices yet).")
    c = cost_summary(cost)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, right in (("STAGE", False), ("POD-HOURS", True), ("RUNNING", True),
                       ("USD", True)):
        table.add_column(col, justify="right" if right else "left")
    unpriced = 0.0
    for st in c["stages"]:
        usd = "?" if st["usd"] is None else f"{st['usd']:,.4f}"
        if st.get("unpricedHours") and st["usd"] is not None:
            usd += " +?"
        unpriced += float(st.get("unpricedHours") or 0)
        table.add_row(str(st["name"]), f"{st['podHours']:,.3f}", str(st["running"]), usd)
    if c["idle"] is not None:
        table.add_row(Text("(idle node time)", style="italic"), "", "", f"{c['idle']:,.4f}")
    if c["total"] is not None:
        table.add_row(Text("total", style="bold"), "", "",
                      Text(f"{c['total']:,.4f}", style="bold"))
    title = f"PipelineRun {name} cost, billed {c['billing'] or 'perSecond'}"
    if c["observedAt"]:
        title += f", as of {c['observedAt']}"
    if not unpriced:
        return Group(Text(title, style="bold"), table)
    return Group(Text(title, style="bold"), table, Text(
        f"?: {unpriced:,.3f} pod-hours ran on a pool with no known price, not counted; "
        "the VirtualCluster's status.cost.unpricedReason says why", style="yellow"))
