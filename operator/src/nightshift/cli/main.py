"""`nightshift` / `kubectl nightshift`: the operator and the user's commands."""

from __future__ import annotations

import argparse
import logging
import sys

from nightshift import __version__


def main(argv: list[str] | None = None) -> int:
    from nightshift.cli import plugin

    if plugin.is_plugin_name(sys.argv[0]):
        # kubectl runs the `kubectl-nightshift` console script: the plugin's own CLI.
        return plugin.main(argv)
    ap = argparse.ArgumentParser(prog="nightshift", description="Batch science pipelines on "
                                 "Kubernetes: PipelineRuns, VirtualClusters, SharedStorage.")
    ap.add_argument("--version", action="version", version=f"nightshift {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    op = sub.add_parser("operator", help="run the operator (reconciles Nightshift objects)")
    scope = op.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[],
                       help="watch only this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="watch every namespace (the default)")
    op.add_argument("--health-port", type=int, default=8080,
                    help="serve GET /healthz on this port (0: off)")
    op.add_argument("--health-host", default="0.0.0.0")  # noqa: S104  (in a pod: the kubelet probes the pod IP)
    op.add_argument("-v", "--verbose", action="store_true")
    # The same commands as `kubectl nightshift ...`, for machines without kubectl.
    plugin.add_commands(sub)
    from nightshift.cli import validate

    validate.add_command(sub)
    from nightshift.cli import simulate

    simulate.add_command(sub)
    args = ap.parse_args(argv)

    if args.cmd == "validate":
        return int(args.run_validate(args))
    if args.cmd == "simulate":
        return int(args.run_simulate(args))

    if args.cmd == "operator":
        from nightshift.cli.operator import run_operator

        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
        return run_operator(namespaces=args.namespace, health_port=args.health_port,
                            health_host=args.health_host)
    return plugin.dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
