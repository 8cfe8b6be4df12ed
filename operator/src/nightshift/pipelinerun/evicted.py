"""Items of a running stage that the kubelet evicts again and again, and what to change.
Pure.

The Job's pod failure policy ignores pods with a DisruptionTarget condition, so a spot
interruption, a drain or a lost node costs an item no retry (jobs.pod_failure_policy).
The kubelet sets the same condition when it evicts a pod because its node ran low on
memory or disk. So an item whose step drives its node into pressure runs again, is
evicted again, and nothing in the Job's status counts it: the run would say Running for
ever. While a stage's Job runs, the I/O layer reads a few of its Failed pods every
READ_SECONDS (one LIST, `limit` PODS_READ); this module says which item was evicted how
often, the kubelet's words, and the field to change. It says nothing of one eviction:
a neighbour's step may have caused it, and the item's next pod may well finish.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.api import names
from nightshift.pipelinerun.spec import Stage

READ_SECONDS = 60.0
PODS_READ = 20
REPEATS = 2  # evictions of one item before the stage says so
REASON = "PodsEvicted"
WORDS_CHARS = 120  # the kubelet's measurement (stages[].waiting holds 400)
_RESOURCE = re.compile(r"low on resource: ([\w.-]+)")
_USING = re.compile(r"Container (\S+) was using (\S+), request is (\S*),")


def kubelet_said(pod: Mapping[str, Any]) -> str | None:
    """The kubelet's message when it evicted `pod` for node pressure (status.reason
    Evicted beside a DisruptionTarget condition by TerminationByKubelet), else None. A
    pod past its own ephemeral-storage limit is Evicted too, but without the condition:
    the policy counts that as a failure, and failure samples say it."""
    status = pod.get("status") or {}
    if status.get("reason") != "Evicted":
        return None
    for c in status.get("conditions") or []:
        if (c.get("type") == names.DISRUPTION_TARGET and c.get("status") == "True"
                and c.get("reason") == "TerminationByKubelet"):
            return " ".join(str(c.get("message") or status.get("message") or "").split())
    return None


def _fix(stage: Stage, i: int, resource: str) -> str:
    if resource == "memory":
        return (f"set spec.stages[{i}].resources.requests.memory to what the step uses, or "
                "a limits.memory so that it fails as OOMKilled and uses its retries")
    if resource == "ephemeral-storage":
        field = ("scratch.size" if stage.scratch is not None
                 else "resources.requests.ephemeral-storage")
        return f"set spec.stages[{i}].{field} to what the step writes"
    return (f"its node ran out of {resource or 'a resource'}: give the step a pool of "
            f"larger nodes (spec.stages[{i}].pool)")


def _measured(words: str, resource: str) -> str:
    """The kubelet's measurement, short: what each container used against its request
    ("Container main was using 3Gi, request is 256Mi"), else its first sentence."""
    used = [f"container {m[0]} used {m[1]}, request {m[2] or '0'}"
            for m in _USING.findall(words)]
    head = f"the node was low on {resource}" if resource else words.partition(". ")[0]
    return "; ".join([head, *used])[:WORDS_CHARS]


def summary(stage: Stage, i: int, pods: Sequence[Mapping[str, Any]]
            ) -> tuple[str, str] | None:
    """(reason, message) when an item of `stage` (spec.stages[i]) was evicted for node
    pressure REPEATS times or more among `pods`, its Job's Failed pods; else None."""
    said: dict[str, str] = {}
    per_item: Counter[str] = Counter()
    for pod in pods:
        words = kubelet_said(pod)
        if words is None:
            continue
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        ix = str(ann.get(names.JOB_COMPLETION_INDEX, "?"))
        per_item[ix] += 1
        said[ix] = words
    if not per_item:
        return None
    (worst, times), = per_item.most_common(1)
    if times < REPEATS:
        return None
    words = said[worst]
    found = _RESOURCE.search(words)
    resource = found.group(1).rstrip(".") if found else ""
    total = sum(per_item.values())
    others = f" ({total} evictions in the stage's pods read)" if total > times else ""
    text = (f"stage {stage.name}: item index {worst} was evicted {times} times for node "
            f"pressure{others} (kubelet: {_measured(words, resource)}); an evicted item "
            f"runs again without using a retry, so it may never finish: "
            f"{_fix(stage, i, resource)}")
    return REASON, text
