"""Running the kopf operator: scope, health endpoint, clean stop on SIGTERM."""

from __future__ import annotations

import kopf


def run_operator(namespaces: list[str], health_port: int, health_host: str = "0.0.0.0") -> int:
    # Importing registers the handlers with kopf's default registry.
    from nightshift.pipelinerun import handlers as _pr  # noqa: F401
    from nightshift.virtualcluster import handlers as _vc  # noqa: F401

    liveness = f"http://{health_host}:{health_port}/healthz" if health_port else None
    # kopf.run installs SIGINT/SIGTERM handlers: the operator finishes the handlers in
    # flight, stops its daemons and exits 0.
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=True,
        liveness_endpoint=liveness,
    )
    return 0
