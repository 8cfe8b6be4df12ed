"""`kubectl nightshift`: status, watch, items, logs, reruns and cost of PipelineRuns.

The reads are what a 10^5-item run can afford: the run object (its status is a few
KB), a metadata-only list of the stage's item ConfigMaps and only the chunks a command
needs, the stage's Jobs when item states need them, and for `logs` a labeled, limited
list of one item's pods. Never a list of all pods. Formatting is in plugin_render.py
and plugin_items.py, decisions in plugin_ops.py; this module does the I/O.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import urllib3
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from nightshift import __version__
from nightshift.api import names
from nightshift.cli import plugin_items as pi
from nightshift.cli import plugin_ops as ops
from nightshift.cli import plugin_render as pr
from nightshift.kube import Kube, KubeError, user_namespace
from nightshift.pipelinerun import mpijob
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.observe import index_maps, read_done

PROG = "kubectl nightshift"
POD_LIST_LIMIT = 20  # pods of one item: one per per-item retry, a handful at most


class PluginError(Exception):
    """What went wrong, said for a person; the command exits 1."""


@dataclass
class Ctx:
    kube: Kube
    namespace: str
    out: Console
    err: Console

    def run(self, name: str) -> dict[str, Any]:
        run = self.kube.get(names.API_VERSION, names.PIPELINERUN, name, self.namespace)
        if run is None:
            if not self.kube.serves(names.API_VERSION):
                # The API server's 404 for a kind it does not serve reads the same as a
                # missing run: a cluster without Nightshift, or the wrong context.
                raise PluginError(f"this cluster does not serve {names.API_VERSION} "
                                  "PipelineRuns: is Nightshift installed here (its CRDs), "
                                  "or is another --context the one?")
            raise PluginError(f"PipelineRun {self.namespace}/{name} not found "
                              "(kubectl get nsruns -n NAMESPACE lists them)")
        return run


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namespace", help="the run's namespace (default: the context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=("text", "json"), default="text",
                   help="json: a machine-readable summary")


def add_commands(sub: Any) -> None:
    """Add the plugin's subcommands to a subparsers object (also used by `nightshift`)."""
    def cmd(name: str, help_: str, fn: Callable[[Ctx, argparse.Namespace], int]
            ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("run", metavar="RUN", help="the PipelineRun's name")
        _common(p)
        p.set_defaults(plugin=fn)
        return p

    _output(cmd("status", "progress per stage, failed items and why, conditions, cost",
                cmd_status))
    w = cmd("watch", "live status until the run succeeds, fails or is cancelled "
                     "(exit 0 only if it succeeds)", cmd_watch)
    w.add_argument("--interval", type=float, default=2.0, help="seconds between reads")
    it = cmd("items", "item values with index and state (from the frozen item "
                      "ConfigMaps), exit codes and reasons where the status has them",
             cmd_items)
    it.add_argument("--stage", help="only this stage (default: all)")
    it.add_argument("--failed", action="store_true",
                    help="only items whose latest attempt failed")
    _output(it)
    lg = cmd("logs", "logs of one item's pod (found by its Job and completion index)",
             cmd_logs)
    lg.add_argument("--stage", required=True, help="the item's stage")
    which = lg.add_mutually_exclusive_group(required=True)
    which.add_argument("--item", help="the item's value, e.g. night-0042")
    which.add_argument("--index", type=int, help="the item's original index")
    lg.add_argument("-c", "--container", help="step container (default: the step that "
                                              "failed, else the last step)")
    lg.add_argument("-p", "--previous", action="store_true",
                    help="the previous instance of the container")
    lg.add_argument("--attempt", type=int, help="the run attempt (default: the latest "
                                                "that ran the item)")
    lg.add_argument("--tail", type=int, help="only the last N lines")
    cmd("rerun-failed", "rerun the failed and never-run items (bumps spec.rerunFailed)",
        cmd_rerun)
    cmd("suspend", "suspend the run (spec.suspend=true)", cmd_suspend)
    cmd("resume", "resume a suspended run (spec.suspend=false)", cmd_resume)
    c = cmd("cancel", "cancel the run for good (spec.cancel=true; cannot be undone)",
            cmd_cancel)
    c.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    _output(cmd("cost", "what the run cost, per stage, total and idle (status.cost)",
                cmd_cost))
    rc = cmd("records", "task records from the run's archive, one row per item (CSV: "
                        "times, node, exit code, usage, cost)", cmd_records)
    rc.add_argument("--stage", help="only this stage (default: all)")
    rc.add_argument("-o", "--output", choices=("csv", "json"), default="csv")
    rc.add_argument("--credentials-from-secret", action="store_true",
                    help="read the archive's keys from the Secret the runner uses (needs "
                    "`get secrets`); default: your own AWS credentials")


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Inspect and operate Nightshift "
                                 "PipelineRuns; fast at 100,000 items.")
    ap.add_argument("--version", action="version", version=f"nightshift {__version__}")
    add_commands(ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND"))
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(parser().parse_args(argv))


def dispatch(args: argparse.Namespace, kube: Kube | None = None,
             out: Console | None = None, err: Console | None = None) -> int:
    err = err or Console(stderr=True)
    try:
        if kube is None:
            kube = Kube.for_user(args.kubeconfig, args.context)
        ns = args.namespace or user_namespace(args.kubeconfig, args.context)
        ctx = Ctx(kube, ns, out or Console(), err)
        return int(args.plugin(ctx, args))
    except PluginError as e:
        err.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
    except ops.OpRefusedError as e:
        err.print(f"[red]refused:[/] {escape(str(e))}", highlight=False)
    except KubeError as e:
        said = e.message if e.status == 0 else str(e)
        if e.status == 401:
            said += ("; the API server does not accept this context's credentials: they "
                     "expired or are wrong (on EKS: aws eks update-kubeconfig, or log in "
                     "again)")
        err.print(f"[red]error:[/] {escape(said)}", highlight=False)
    except urllib3.exceptions.HTTPError as e:
        err.print(f"[red]error:[/] cannot reach the API server: {escape(str(e))}",
                  highlight=False)
    except KeyboardInterrupt:
        return 130
    return 1


def _json(obj: Any) -> None:
    # Plain write: the rich console would wrap long lines and highlight.
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


# -- status, watch, cost ------------------------------------------------------------

def cmd_status(ctx: Ctx, args: argparse.Namespace) -> int:
    s = pr.summary(ctx.run(args.run))
    if args.output == "json":
        _json(s)
    else:
        ctx.out.print(pr.status_view(s, width=ctx.out.width))
    return 0


def cmd_watch(ctx: Ctx, args: argparse.Namespace) -> int:
    s = pr.summary(ctx.run(args.run))
    with Live(pr.status_view(s, width=ctx.out.width), console=ctx.out,
              auto_refresh=False) as live:
        while not s["terminal"]:
            time.sleep(max(0.2, args.interval))
            s = pr.summary(ctx.run(args.run))
            live.update(pr.status_view(s, width=ctx.out.width), refresh=True)
    return 0 if s["phase"] == "Succeeded" else 1


def cmd_cost(ctx: Ctx, args: argparse.Namespace) -> int:
    run = ctx.run(args.run)
    cost = (run.get("status") or {}).get("cost")
    if args.output == "json":
        _json({"name": args.run, "namespace": ctx.namespace, "cost": cost,
                    "summary": pr.cost_summary(cost) if cost else None})
    else:
        ctx.out.print(pr.cost_view(args.run, cost), highlight=False)
    return 0


def cmd_records(ctx: Ctx, args: argparse.Namespace) -> int:
    from nightshift.cli import plugin_archive
    from nightshift.cli.plugin_records import RecordsError

    run = ctx.run(args.run)
    try:
        return plugin_archive.records(ctx.kube, ctx.namespace, run,
                                      _records(run, args.stage), args, ctx.err)
    except RecordsError as e:
        raise PluginError(str(e)) from e


# -- items and logs -------------------------------------------------------------------

def _records(run: Mapping[str, Any], stage: str | None) -> list[dict[str, Any]]:
    recs = {r.get("name"): r for r in (run.get("status") or {}).get("stages") or []}
    order = [s.get("name") for s in (run.get("spec") or {}).get("stages") or []]
    if stage is not None and stage not in order:
        raise PluginError(f"the run has no stage {stage!r}; its stages are "
                          f"{', '.join(map(str, order))}")
    return [dict(recs.get(n) or {"name": n}) for n in order if stage in (None, n)]


def _tolerate(run: Mapping[str, Any], stage: str) -> int | None:
    tolerate = pi.stage_spec(run, stage).get("tolerateFailedItems")
    return None if tolerate is None else int(tolerate)


def _batch(run: Mapping[str, Any], stage: str) -> int:
    return int(pi.stage_spec(run, stage).get("batch") or 1)


def _view(ctx: Ctx, run: Mapping[str, Any], rec: Mapping[str, Any], total: int,
          states: bool = True) -> pg.StageView:
    """The stage as the operator sees it, from its Jobs and its status entry `rec` (what
    earlier attempts whose Jobs are gone did). `states`: item states are wanted, so the
    stage's done set is read where its succeededItems is cut (`logs` needs only where an
    item ran)."""
    stage = str(rec["name"])
    name = run["metadata"]["name"]
    selector = f"{names.LABEL_RUN}={name},{names.LABEL_STAGE}={stage}"
    jobs = ctx.kube.list("batch/v1", "Job", ctx.namespace, label_selector=selector)
    if pi.stage_spec(run, stage).get("mpi"):
        # An mpi stage runs as an MPIJob, read as the operator reads it (one item).
        try:
            jobs += [mpijob.as_job(m) for m in ctx.kube.list(
                mpijob.API_VERSION, mpijob.KIND, ctx.namespace, label_selector=selector)]
        except KubeError as e:
            if e.status != 404:  # no MPI Operator: no MPIJob either
                raise
    # As the operator does: a retry Job's map kept in its indexes ConfigMaps (one GET
    # per chunk, only for such Jobs), and the done set (one GET, only where cut).
    maps = index_maps(ctx.kube, dict(run), jobs, {})
    done: dict[str, str] = {}
    if states:
        read_done(ctx.kube, dict(run), done, only=stage)
    return pg.stage_view(pi.stage_jobs(jobs, name, stage), total, _tolerate(run, stage),
                         rec, batch=_batch(run, stage), done_ranges=done.get(stage, ""),
                         maps=maps)


def _items(ctx: Ctx, run: str, stage: str, indexes: Sequence[int] | None) -> pi.ItemList:
    metas = ctx.kube.list_metadata("v1", "ConfigMap", ctx.namespace, label_selector=(
        f"{names.LABEL_RUN}={run},{names.LABEL_STAGE}={stage}"))
    chunks = pi.item_chunks(metas, run, stage)
    cms = []
    for c in pi.chunks_for(chunks, indexes):
        cm = ctx.kube.get("v1", "ConfigMap", c.name, ctx.namespace)
        if cm is not None:
            cms.append(cm)
    return pi.ItemList(cms)


def stage_items(ctx: Ctx, run: Mapping[str, Any], rec: Mapping[str, Any], failed_only: bool
                ) -> dict[str, Any]:
    name, stage = run["metadata"]["name"], str(rec["name"])
    total = int(rec.get("total") or 0)
    out: dict[str, Any] = {"name": stage, "phase": rec.get("phase") or "Pending",
                           "total": total}
    if rec.get("attempt") is None:
        out["items"] = []
        out["note"] = "the stage has not started; its items are resolved when it starts"
        return out
    view: pg.StageView | None = None
    if failed_only:
        indexes = pi.failed_from_status(rec)
        if indexes is None:  # cut short in the status: the Job has them all
            view = _view(ctx, run, rec, total)
            indexes = sorted(view.failed)
        state_of = None
    else:
        if not pi.trivially_succeeded(rec):
            view = _view(ctx, run, rec, total)
            total = total or view.total
        indexes = list(range(total))
        state_of = pi.states(total, rec, view)
    items = _items(ctx, name, stage, indexes if failed_only else None)
    out["items"] = pi.item_rows(items, indexes, state_of, rec)
    return out


def cmd_items(ctx: Ctx, args: argparse.Namespace) -> int:
    run = ctx.run(args.run)
    stages = [stage_items(ctx, run, rec, args.failed) for rec in _records(run, args.stage)]
    if args.output == "json":
        _json({"name": args.run, "namespace": ctx.namespace, "stages": stages})
        return 0
    lines: list[str] = []
    for st in stages:
        what = "failed items" if args.failed else "items"
        lines.append(f"# stage {st['name']} ({st['phase']}): {len(st['items']):,} {what}"
                     + (f"; {st['note']}" if st.get("note") else ""))
        if st["items"]:
            lines.extend(pi.format_rows(st["items"]))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_logs(ctx: Ctx, args: argparse.Namespace) -> int:
    run = ctx.run(args.run)
    (rec,) = _records(run, args.stage)
    if rec.get("attempt") is None:
        raise PluginError(f"stage {args.stage} has not started; it has no pods yet")
    total = int(rec.get("total") or 0)
    value = args.item
    if args.item is not None:
        index = _items(ctx, args.run, args.stage, None).index_of(args.item)
        if index is None:
            raise PluginError(f"stage {args.stage} has no item {args.item!r} "
                              f"(kubectl nightshift items {args.run} --stage {args.stage})")
    else:
        index = args.index
        if index < 0 or (total and index >= total):
            raise PluginError(f"--index {index} is outside stage {args.stage}'s "
                              f"0..{total - 1}")
    try:
        where = pi.locate(_view(ctx, run, rec, total, states=False), index,
                          args.attempt)
    except LookupError as e:
        raise PluginError(f"stage {args.stage}: {e}") from None
    mpi = bool(pi.stage_spec(run, args.stage).get("mpi"))
    pods = ctx.kube.list("v1", "Pod", ctx.namespace,
                         label_selector=pi.pod_selector(args.run, args.stage, where, mpi=mpi),
                         limit=POD_LIST_LIMIT)
    pod = pi.newest_pod(pods)
    if pod is None:
        raise PluginError(f"no pod of Job {where.job} for item {index} (completion index "
                          f"{where.completion_index}): not started yet, or removed with "
                          "its Job")
    pod_name = pod["metadata"]["name"]
    container = args.container or pi.pick_container(pod, args.previous)
    ctx.err.print(f"pod {pod_name} (item {index}{f' {value}' if value else ''}, attempt "
                  f"{where.attempt}, {len(pods)} pod(s) for it), container {container} "
                  f"of {', '.join(pi.container_names(pod))}", style="dim", highlight=False,
                  markup=False)
    text = ctx.kube.pod_log(ctx.namespace, pod_name, container, args.previous, args.tail)
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0


# -- changes ----------------------------------------------------------------------------

def _change(ctx: Ctx, name: str, decide: Callable[[Mapping[str, Any]], ops.Change],
            confirm: Callable[[ops.Change], bool] | None = None) -> int:
    for _ in range(5):
        run = ctx.run(name)
        change = decide(run)
        if change.spec is None:
            ctx.out.print(change.message, highlight=False, markup=False)
            return 0
        if confirm is not None and not confirm(change):
            return 1
        confirm = None
        try:
            ctx.kube.merge_patch(names.API_VERSION, names.PIPELINERUN, name, ctx.namespace,
                                 ops.merge_patch(run, change.spec))
        except KubeError as e:
            if e.status == 409:  # the run changed since we read it: decide again
                continue
            raise
        ctx.out.print(change.message, highlight=False, markup=False)
        return 0
    raise PluginError(f"PipelineRun {name} kept changing under five attempts; try again")


def cmd_rerun(ctx: Ctx, args: argparse.Namespace) -> int:
    return _change(ctx, args.run, ops.rerun_failed)


def cmd_suspend(ctx: Ctx, args: argparse.Namespace) -> int:
    return _change(ctx, args.run, ops.suspend)


def cmd_resume(ctx: Ctx, args: argparse.Namespace) -> int:
    return _change(ctx, args.run, ops.resume)


def cmd_cancel(ctx: Ctx, args: argparse.Namespace) -> int:
    def confirm(change: ops.Change) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            raise PluginError("cancel cannot be undone; pass --yes to confirm")
        answer = input(f"Cancel PipelineRun {ctx.namespace}/{args.run} for good? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    return _change(ctx, args.run, ops.cancel, confirm)


def is_plugin_name(argv0: str) -> bool:
    """True when started as kubectl's plugin (kubectl execs `kubectl-nightshift`)."""
    base = os.path.basename(argv0)
    return base.startswith(("kubectl-nightshift", "kubectl_nightshift"))
