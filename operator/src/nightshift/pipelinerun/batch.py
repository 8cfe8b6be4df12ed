"""Task batching (stages[].batch: K): one pod runs K consecutive items one after another.

The unit of a Job stays the *position*: line p of the Job's list, which is the stage's
item p for attempt 0 and line p of the `indexes` map for a retry or replacement Job
(api/itemlookup.py). Batching only groups positions: completion index c runs positions
[c*K, min(P, (c+1)*K)) of the Job's P positions, so a retry Job re-packs the items
still to run densely (3 failed items of 3 different batches run in one pod, not 3), and
every record outside the pod (succeededItems, skip-items, the indexes map) stays in
items, as without batching.

Status is counted from the Job's completedIndexes/failedIndexes: every item of a
completed index succeeded (the pod exits 0 only then); every item of a failed index
counts as failed, even those that succeeded in it (the pod's log and, later, the
per-item task records say which). That is the imprecision batching buys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nightshift.api import names
from nightshift.api.problems import Problem
from nightshift.pipelinerun.spec import PipelineRunSpec, Stage

DEFAULT = 1
MAX = 1000
# The kubelet's count of this index's failed pods (backoffLimitPerIndex), read through
# the downward API: the first pod of a batch retries an item in place, later pods not.
ANNOTATION_INDEX_FAILURES = "batch.kubernetes.io/job-index-failure-count"


def completions(positions: int, batch: int) -> int:
    """The Job's completions for `positions` items run `batch` to a pod."""
    return -(-positions // max(1, batch))


def positions(index: int, batch: int, count: int) -> range:
    """The positions completion index `index` runs (the last batch may be short)."""
    k = max(1, batch)
    return range(index * k, min(count, (index + 1) * k))


def items_of(indexes: Iterable[int], batch: int, count: int,
             mapping: Sequence[int] | None) -> set[int]:
    """The original item indexes that completion indexes `indexes` run.

    `count` is the Job's number of positions; `mapping` its position -> original index
    map (None: the identity, attempt 0).
    """
    out: set[int] = set()
    for c in indexes:
        for p in positions(c, batch, count):
            out.add(p if mapping is None else mapping[p])
    return out


def job_positions(job: Mapping[str, Any]) -> int | None:
    """A batched Job's number of positions, from its pod template (None: not batched)."""
    spec = (((job.get("spec") or {}).get("template") or {}).get("spec") or {})
    for c in spec.get("containers") or []:
        for e in c.get("env") or []:
            if e.get("name") == names.ENV_BATCH_POSITIONS and str(e.get("value")).isdigit():
                return int(e["value"])
    return None


def max_failed_indexes(tolerate: int, batch: int, completions_: int) -> int:
    """tolerateFailedItems in whole batches: a failed batch counts all its items as
    failed, so floor(tolerate / K) failed batches keep the counted items within it.
    The API refuses maxFailedIndexes above completions (retry Jobs are smaller)."""
    return min(tolerate // max(1, batch), completions_)


def pod_env(batch: int, positions_: int, per_item: int,
            permanent: Sequence[int]) -> list[dict[str, Any]]:
    """What run.sh's batch loop reads; nothing for batch 1 (pod templates unchanged)."""
    if batch <= 1:
        return []
    return [
        {"name": names.ENV_BATCH, "value": str(batch)},
        {"name": names.ENV_BATCH_POSITIONS, "value": str(positions_)},
        {"name": names.ENV_BATCH_RETRIES, "value": str(per_item)},
        {"name": names.ENV_BATCH_PERMANENT, "value": " ".join(map(str, sorted(set(permanent))))},
        {"name": names.ENV_BATCH_FAILURES, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{ANNOTATION_INDEX_FAILURES}']"}}},
    ]


def problems(path: str, st: Stage, spec: PipelineRunSpec) -> list[Problem]:
    """What validate.py reports about stages[].batch (`path` is the stage's)."""
    k = st.batch
    if not DEFAULT <= k <= MAX:
        return [Problem(f"{path}.batch", f"{k} must be between 1 (a pod per item) and "
                        f"{MAX}")]
    if k == 1:
        return []
    if st.mpi is not None:
        return [Problem(f"{path}.batch", "an mpi stage runs one program once, there are no "
                        "items to batch: remove batch")]
    p: list[Problem] = []
    uses = [n for n, v in (("inputs", st.inputs), ("outputs", st.outputs),
                           ("spec.archive", spec.archive)) if v]
    if uses:
        p.append(Problem(f"{path}.batch", f"batch {k} with {', '.join(uses)}: the runner "
                         "stages, commits and records one item per pod, so batching is only "
                         "for stages without inputs, outputs and spec.archive for now; set "
                         "batch: 1, or read and write the storage from the steps themselves"))
    tol = st.tolerate_failed_items
    if tol is not None and tol % k:
        p.append(Problem(f"{path}.tolerateFailedItems", f"{tol} is not a multiple of batch "
                         f"({k}): a failed batch counts all its items as failed, so failures "
                         f"are tolerated in whole batches; use e.g. {tol // k * k} or "
                         f"{(tol // k + 1) * k}"))
    return p


# POSIX sh, builtins only (user images promise /bin/sh). Runs after run.sh defined
# item_env (the item of position $JOB_COMPLETION_INDEX into $item and $orig, exported)
# and run_step (exec the step, placeholders replaced) and set $step, $dir and the
# step's argv in "$@". Markers (files, as no mkdir is
# promised) live in the pod's work volume, which every container of the pod shares:
#   <state>/.nightshift-batch-<orig>.failed   "<rc> <p>" the item failed at a step (p:
#                                             a permanent exit code); later steps skip it
#   <state>/.nightshift-batch-<orig>.done     the item is known to have succeeded in an
#                                             earlier pod: every step skips it
SH_BATCH = f"""\
# Batch: positions idx*K .. min(P, idx*K+K)-1 of this Job, one after another.
count=${{{names.ENV_BATCH_POSITIONS}:?batched pods need {names.ENV_BATCH_POSITIONS}}}
retries=${{{names.ENV_BATCH_RETRIES}:-0}}
# Retry pods of a batch (the index failed before) run each item once more, no retries.
case ${{{names.ENV_BATCH_FAILURES}:-0}} in ''|0) ;; *) retries=0 ;; esac
permanent=" ${{{names.ENV_BATCH_PERMANENT}:-}} "
state=${{{names.ENV_BATCH_STATE}:-{names.MOUNT_WORK}}}
batch=${{{names.ENV_BATCH}}}
ci=${{{names.ENV_COMPLETION_INDEX}:?run.sh must run in a pod of an Indexed Job}}
pos=$((ci * batch))
end=$((pos + batch))
if [ "$end" -gt "$count" ]; then end=$count; fi
stop=
child=
trap 'stop=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM
trap 'stop=1; [ -n "$child" ] && kill -INT "$child" 2>/dev/null' INT
failed_rc=
permanent_rc=
while [ "$pos" -lt "$end" ] && [ -z "$stop" ]; do
  {names.ENV_COMPLETION_INDEX}=$pos
  item_env
  # item_env leaves globbing off (the fields' set -f); the next lookup's chunks need it.
  set +f
  {names.ENV_COMPLETION_INDEX}=$ci
  mark=$state/.nightshift-batch-$orig
  pos=$((pos + 1))
  if [ -e "$mark.done" ]; then continue; fi
  if [ -e "$mark.failed" ]; then
    read -r rc perm < "$mark.failed" || :
  else
    try=0
    while :; do
      run_step "$@" &
      child=$!
      while :; do
        rc=0
        wait "$child" || rc=$?
        # >128 with the child alive: a trapped signal interrupted wait, not the child.
        if [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; fi
        break
      done
      child=
      perm=
      if [ "$rc" -eq 0 ] || [ -n "$stop" ]; then break; fi
      case $permanent in *" $rc "*) perm=p ;; esac
      if [ -n "$perm" ] || [ "$try" -ge "$retries" ]; then break; fi
      try=$((try + 1))
      echo "nightshift: item $orig ($item) step $step exited $rc; retry $try of $retries" >&2
    done
    if [ -n "$stop" ]; then break; fi
    if [ "$rc" -eq 0 ]; then continue; fi
    echo "nightshift: item $orig ($item) failed at step $step (exit $rc)" >&2
    printf '%s %s\\n' "$rc" "$perm" > "$mark.failed"
  fi
  if [ -n "$perm" ]; then permanent_rc=${{permanent_rc:-$rc}}
  else failed_rc=${{failed_rc:-$rc}}; fi
done
if [ -n "$stop" ]; then exit 143; fi
# Only the last step decides the pod's fate; earlier ones leave the failures to it, so
# the batch's other items still run their later steps.
if [ "$step" != "${{{names.ENV_LAST_STEP}:-}}" ]; then exit 0; fi
# A retryable failure first: the Job retries the batch. All permanent: FailIndex.
if [ -n "$failed_rc" ]; then exit "$failed_rc"; fi
if [ -n "$permanent_rc" ]; then exit "$permanent_rc"; fi
exit 0
"""
