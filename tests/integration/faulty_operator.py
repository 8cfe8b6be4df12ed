"""The real operator with one planted fault, for the engine's error-policy test: a
VirtualCluster pass raises while the object carries FAULT_ANNOTATION. Everything else
(the engine, the API client, the status writes) is the product's own code.

Run as `python -m tests.integration.faulty_operator operator --namespace NS`.
"""

from __future__ import annotations

import sys

from nightshift.cli.main import main
from nightshift.engine.loop import ErrorPolicy
from nightshift.virtualcluster import handlers, reconcile
from nightshift.virtualcluster.plan import Observed, Plan, plan

FAULT_ANNOTATION = "test.nightshift.io/raise"
_real_plan = plan


def _faulty_plan(o: Observed) -> Plan:
    if (o.vc["metadata"].get("annotations") or {}).get(FAULT_ANNOTATION):
        raise RuntimeError("planted fault: the VirtualCluster planner raised")
    return _real_plan(o)


if __name__ == "__main__":
    setattr(reconcile, "plan", _faulty_plan)  # noqa: B010 (the pass looks it up there)
    # Seconds, not a minute, between retries: the test waits for three failures.
    handlers.LOOPS.policy = ErrorPolicy(first_delay=1.0, max_delay=2.0, report_after=3)
    sys.exit(main())
