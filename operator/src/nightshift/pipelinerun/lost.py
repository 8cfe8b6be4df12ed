"""Stage Jobs lost mid-run (deleted by hand or by another tool while the run went on).

The run's record says which Jobs were seen running. One the API server no longer has
is replaced by a new attempt that runs only the items the record does not hold as
succeeded (plan.py); before that, the reconcile pass asks whether the lost Job's pods
are gone, so two pods never work on one item. Pure: the run and its Jobs come in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.pipelinerun import items as itemsmod
from nightshift.pipelinerun import progress as pg
from nightshift.pipelinerun.spec import TERMINAL_PHASES

# Seconds between looks while a lost Job's pods go away.
LOST_POD_WAIT = 5.0


def lost_jobs(run: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]
              ) -> dict[str, dict[str, str]]:
    """Jobs the run's record says were seen running and that are not there any more,
    each with the labels of its pods: the reconcile pass asks whether those pods are
    gone (Observed.live_pods)."""
    status = run.get("status") or {}
    if status.get("phase") in TERMINAL_PHASES:
        return {}
    present = {(j.get("metadata") or {}).get("name") for j in jobs}
    run_name = str((run.get("metadata") or {}).get("name") or "")
    out = {}
    for rec in status.get("stages") or []:
        if rec.get("phase") in (pg.SUCCEEDED, pg.FAILED) or not rec.get("jobName"):
            continue
        latest: Mapping[str, Any] = next(
            (a for a in rec.get("attempts") or [] if a.get("attempt") == rec.get("attempt")),
            {})
        if latest.get("jobUID") and rec["jobName"] not in present:
            out[str(rec["jobName"])] = itemsmod.attempt_labels(
                run_name, str(rec.get("name") or ""), int(rec.get("attempt") or 0))
    return out


def waiting(stage: str, job: str, namespace: str, selector: str, *,
            replaced: bool = True) -> str:
    """What a stage says while its lost Job's pods hold the replacement back (or, in a
    run that starts no replacement, the stage's end)."""
    held = ("its replacement waits for them, so that no item runs twice" if replaced
            else "the stage ends once they do (an Invalid run starts no replacement)")
    return (f"stage {stage}: Job {job} is gone but some of its pods are not; {held} (pods left by "
            f"--cascade=orphan, or on a node that is gone: kubectl delete pods -n {namespace} "
            f"-l {selector}; one stuck Terminating on a node that no longer answers needs "
            "--grace-period=0 --force, once the node is known to be down)")
