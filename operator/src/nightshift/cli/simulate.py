"""`nightshift simulate`: what a run will take and cost, before money is spent.

    nightshift simulate RUN.yaml [VC.yaml ...] --durations MODEL.yaml [--compare VARIANTS.yaml]

Runs the PipelineRun on a cluster with Karpenter's KWOK provider (the local cluster:
`nightshift-localcluster up`), its pools as written, its tasks' durations drawn from
MODEL.yaml, time compressed by the model's `scale`; prints makespan, node mix, cost and
utilisation. With --compare, runs each variant of VARIANTS.yaml one after the other and
prints one table. docs/simulate.md has the file formats.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

SUFFIXES = (".yaml", ".yml", ".json")
VARIANT_FIELDS = {"virtualCluster", "pipelineRun", "spotInterruptionsPerHour", "description"}


def add_command(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate", help="run a PipelineRun on Karpenter's KWOK provider with modelled "
        "task durations: makespan, node mix, cost, utilisation",
        description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="the run's manifests: files or folders holding the PipelineRun and "
                   "its VirtualCluster (other kinds are ignored)")
    p.add_argument("--durations", required=True, metavar="MODEL.yaml",
                   help="per-stage duration models, scale, boot time, spot interruption rate")
    p.add_argument("--compare", metavar="VARIANTS.yaml",
                   help="named variants (changes to the VirtualCluster's pools and the run's "
                   "spec), each simulated in turn; one table")
    p.add_argument("--variant", action="append", default=[], metavar="NAME",
                   help="only these variants of --compare (repeatable)")
    p.add_argument("--run", metavar="NAME", help="the PipelineRun, when the files hold more")
    p.add_argument("--scale", type=float, help="override the model's scale (real seconds "
                   "per modelled second)")
    p.add_argument("--spot-interruptions", type=float, metavar="PER_HOUR",
                   help="override the model's spot interruptions per spot node-hour")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="give up on a variant after this many real seconds (default 1800)")
    p.add_argument("--use-running-operator", action="store_true",
                   help="rely on an operator already watching every namespace instead of "
                   "starting one for the simulation's namespaces")
    p.add_argument("--kubeconfig", help="default: KUBECONFIG, then ~/.kube/config")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(run_simulate=run)


def documents(paths: Sequence[str]) -> list[dict[str, Any]]:
    import yaml

    files: list[Path] = []
    for p in map(Path, paths):
        files += (sorted(f for f in p.glob("*") if f.suffix in SUFFIXES) if p.is_dir()
                  else [p])
    out = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
                out.append(doc)
    return out


def variants(path: str | None, only: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, patch) pairs; a run without --compare is the one variant "as-written"."""
    import yaml

    from nightshift.simulate.convert import SimulationError

    if path is None:
        return [("as-written", {})]
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) or v is None
                                            for v in raw.values()):
        raise SimulationError(f"{path}: a mapping of variant names to changes, e.g. "
                              "`on-demand: {virtualCluster: {pools: {\"*\": {capacity: "
                              "on-demand}}}}`")
    for name, v in raw.items():
        extra = set(v or {}) - VARIANT_FIELDS
        if extra:
            raise SimulationError(f"{path}: {name}: unknown field(s) {sorted(extra)}; a "
                                  f"variant has {', '.join(sorted(VARIANT_FIELDS))}")
        rate = (v or {}).get("spotInterruptionsPerHour", 0)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0:
            raise SimulationError(f"{path}: {name}.spotInterruptionsPerHour: {rate!r} is "
                                  "not a number >= 0")
    missing = set(only) - set(raw)
    if missing:
        raise SimulationError(f"--variant {sorted(missing)}: not in {path} (it has "
                              f"{sorted(raw)})")
    return [(str(k), v or {}) for k, v in raw.items() if not only or k in only]


def render_table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                  + "\n")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    import dataclasses

    import yaml
    from rich.console import Console

    from nightshift.kube import Kube, KubeError
    from nightshift.simulate import convert, model, report, session, variantcheck

    out = out or sys.stdout
    err = Console(stderr=True)
    try:
        mpath = Path(args.durations)
        m = model.parse(yaml.safe_load(mpath.read_text(encoding="utf-8")), mpath.parent)
        if args.scale is not None:
            m = dataclasses.replace(m, scale=args.scale)
        if args.spot_interruptions is not None:
            m = dataclasses.replace(m, spot_interruptions_per_hour=args.spot_interruptions)
        run_doc, vc_doc = convert.pick(documents(args.files), args.run)
        chosen = variants(args.compare, args.variant)
        for name, patch in chosen:  # before the cluster is asked anything
            variantcheck.check(name, vc_doc, run_doc, patch)
        kube = Kube.for_user(args.kubeconfig)
        runner = session.Runner(kube, m, err, timeout=args.timeout,
                                prices=session.prices_from_env())
        runner.preflight()
        # Convert every variant before starting any: a bad variant fails in a second.
        sims = [runner.prepare(name, vc_doc, run_doc, patch) for name, patch in chosen]
    except (OSError, yaml.YAMLError, model.ModelError, convert.SimulationError,
            KubeError) as e:
        err.print(f"error: {e}", markup=False, highlight=False, style="red")
        return 2
    op = None if args.use_running_operator else session.OperatorProcess(runner.namespace_glob)
    results = []
    try:
        for sim in sims:
            results.append(runner.simulate(sim, op.check if op else lambda: None))
    except (KubeError, RuntimeError) as e:
        err.print(f"error: {e}", markup=False, highlight=False, style="red")
        return 1
    except KeyboardInterrupt:
        err.print("interrupted: cleaning up")
        return 130
    finally:
        if op:
            op.stop()
    if args.output == "json":
        json.dump({"scale": m.scale, "billing": m.billing,
                   "results": [r.as_dict() for r in results]}, out, indent=2)
        out.write("\n")
    else:
        render_table(report.table_rows(results), out)
        out.write(f"\nmodelled time (scale {m.scale:g}); cost billed {m.billing}; "
                  "utilisation = pods' requested share of their nodes' time.\n")
    return 0 if all(r.phase == "Succeeded" for r in results) else 1
