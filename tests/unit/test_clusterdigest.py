"""The digest of Karpenter's log printed under a failed integration session
(tests/integration/clusterdigest.py), on lines shaped as v1.14.1 writes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tests.integration.clusterdigest import karpenter_digest

SINCE = datetime(2026, 11, 29, 1, 58, tzinfo=UTC)


def line(time: str, message: str, level: str = "INFO", **fields: object) -> str:
    return json.dumps({"level": level, "time": time, "logger": "controller",
                       "message": message, **fields})


def test_disruptions_and_errors_counted_routine_refusals_and_old_lines_left_out() -> None:
    drifted = {"controller": "disruption", "decision": "replace",
               "command": "Drifted/b5d9: replace: nodepools=[smoke-x]: [kwok-smoke-x-1] -> "
                          "[1 replacement] (savings: $0.00)"}
    lines = [
        line("2026-11-29T01:57:00.000Z", "disrupting node(s)", **drifted),  # before
        line("2026-11-29T01:58:23.727Z", "disrupting node(s)", **drifted),
        line("2026-11-29T01:59:01.100Z", "disrupting node(s)", **drifted),
        line("2026-11-29T01:59:02.000Z", "disrupting node(s)", controller="disruption",
             decision="delete", command="Empty/8e7c: delete: nodepools=[p]: [n] (savings)"),
        line("2026-11-29T01:58:08.785Z", "Reconciler error", "ERROR",
             controller="state.nodeclaim", error='NodePool.karpenter.sh "doomed" not found '
             "(nodeclaim=doomed-x, nodepool=doomed)"),
        line("2026-11-29T01:58:08.900Z", "Reconciler error", "ERROR",
             controller="state.nodeclaim", error='NodePool.karpenter.sh "simvc" not found '
             "(nodeclaim=simvc-y, nodepool=simvc)"),
        line("2026-11-29T01:58:09.000Z", "could not schedule pod", "ERROR",
             controller="provisioner", error="did not tolerate taint"),
        "not json",
        line("2026-11-29T01:58:10.000Z", "created nodeclaim"),
    ]
    assert karpenter_digest(lines, SINCE) == [
        "     2 x disrupting node(s): Drifted: replace (last 2026-11-29T01:59:01.100Z)",
        '     2 x state.nodeclaim: Reconciler error: NodePool.karpenter.sh "…" not found '
        "(last 2026-11-29T01:58:08.900Z)",
        "     1 x disrupting node(s): Empty: delete (last 2026-11-29T01:59:02.000Z)",
    ]
