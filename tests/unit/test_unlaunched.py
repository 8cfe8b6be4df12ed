"""Pods no node takes on a VirtualCluster's pool (pipelinerun/unlaunched.py): Karpenter's
FailedScheduling says it launches no node for them, where the scheduler's words alone
read as "nodes may still be launching"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nightshift.pipelinerun import observe, stalled, unlaunched
from nightshift.pipelinerun.spec import PipelineRunSpec
from tests.bad_pipelineruns import run as manifest
from tests.bad_pipelineruns import stage

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
# Recorded from the local bed's Karpenter (v1.14.1, KWOK provider) for a 1000-CPU pod:
# its last relaxed term, the hand-labeled nodes' one, is all it reports.
RELAXED = ("Failed to schedule pod, incompatible requirements, key "
           "nightshift.io/virtual-cluster, nightshift.io/virtual-cluster DoesNotExist not in "
           "nightshift.io/virtual-cluster In [fits]")
# The shape Karpenter gives when the NodePool's own term is the one it reports
# (scheduling/nodeclaim.go's error, wrapped by the NodePool it was tried on).
ONE_POOL = ('Failed to schedule pod, incompatible with nodepool "fits-small", daemonset '
            'overhead={"cpu":"100m","pods":"2"}, no instance type met the scheduling '
            "requirements or had enough resources, requirements=karpenter.sh/capacity-type "
            "In [on-demand], karpenter.kwok.sh/instance-family In [c5 c6i c7i], "
            'nightshift.io/pool In [small], resources={"cpu":"1k","pods":"1"}')
SCHEDULER = ("0/11 nodes are available: 11 node(s) had untolerated taint(s). preemption: "
             "0/11 nodes are available: 11 Preemption is not helpful for scheduling.")


def unschedulable_pod(name: str = "huge-s-1bc55c-0-fbq9r", uid: str = "u0") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": SCHEDULER}]}}


def event(message: str, component: str = "karpenter", ago: float = 5,
          uid: str = "u0") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "type": "Warning",
            "metadata": {"name": f"e-{component}-{ago}", "namespace": "physics"},
            "involvedObject": {"kind": "Pod", "uid": uid}, "reason": "FailedScheduling",
            "source": {"component": component} if component else {}, "message": message,
            "lastTimestamp": (NOW - timedelta(seconds=ago)).isoformat()}


def huge_stage(**extra: Any) -> Any:
    spec = manifest([stage("s", resources={"requests": {"cpu": "1000"}}, **extra)])["spec"]
    return PipelineRunSpec.model_validate(spec).stages[0]


def test_only_pods_the_scheduler_found_no_node_for_are_read() -> None:
    pod = unschedulable_pod()
    assert unlaunched.unschedulable(pod)
    assert not unlaunched.unschedulable({"status": {"conditions": [
        {"type": "PodScheduled", "status": "True"}]}})
    assert not unlaunched.unschedulable({"status": {"conditions": [  # not yet tried
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}})
    assert unlaunched.first([{"status": {}}, pod]) is pod


def test_only_karpenters_failed_scheduling_and_nomination_count() -> None:
    assert unlaunched.karpenters(event(RELAXED))
    assert not unlaunched.karpenters(event(SCHEDULER, component="default-scheduler"))
    # Recorded without a source (events.k8s.io/v1 writers): its wording says whose it is.
    assert unlaunched.karpenters(event(RELAXED, component=""))
    assert unlaunched.karpenters({**event("Pod should schedule on: node/n"), "reason": "Nominated"})
    assert not unlaunched.karpenters({**event("blocked"), "reason": "DisruptionBlocked"})


def test_karpenters_words_keep_why_and_what_the_pod_asks_for() -> None:
    assert unlaunched.words(ONE_POOL) == (
        "no instance type met the scheduling requirements or had enough resources, "
        'resources={"cpu":"1k","pods":"1"}')
    assert unlaunched.words(RELAXED) == ""  # of the hand-labeled nodes, not the pool


# Karpenter's message with other tests' NodePools about: one error per NodePool, joined
# with "; ", most without a name. The two taint errors and the start of the pool's own
# are as a CI rehearsal recorded them (session 30, cut there by the status's length), and
# so is the "does not have known values" part (a later rehearsal: a NodePool without the
# label); the rest follows the shapes of scheduling/scheduler.go and requirements.go.
SEVERAL = ("Failed to schedule pod, did not tolerate taint "
           "(taint=nightshift.io/pool=wffe9d:NoSchedule); did not tolerate taint "
           "(taint=nightshift.io/pool=mffe9d:NoSchedule); incompatible requirements, key "
           "nightshift.io/virtual-cluster, nightshift.io/virtual-cluster DoesNotExist not in "
           "nightshift.io/virtual-cluster In [fits]; incompatible requirements, key "
           "nightshift.io/virtual-cluster-namespace, nightshift.io/virtual-cluster-namespace "
           "In [other] not in nightshift.io/virtual-cluster-namespace In [physics]; "
           'incompatible requirements, label "nightshift.io/virtual-cluster" does not have '
           "known values; "
           "all available instance types exceed limits for nodepool "
           "(NodePool=survey-big-spot-0a1b2c); no instance type has enough resources, "
           "requirements=karpenter.sh/capacity-type In [on-demand], nightshift.io/pool In "
           '[small], resources={"cpu":"1k","pods":"1"}')


def test_only_the_pools_own_nodepools_errors_are_quoted() -> None:
    own = unlaunched.own_nodepools("physics", "fits", "small")
    assert len(own) == 3 and all(n.startswith("fits-small") for n in own)
    assert unlaunched.words(SEVERAL, own) == (
        'no instance type has enough resources, resources={"cpu":"1k","pods":"1"}')
    mine = sorted(own)[0]
    limited = SEVERAL.replace("survey-big-spot-0a1b2c", mine)
    assert unlaunched.words(limited, own) == (
        f"all available instance types exceed limits for nodepool (NodePool={mine}); "
        'no instance type has enough resources, resources={"cpu":"1k","pods":"1"}')
    # Only other NodePools' errors: nothing to quote.
    assert unlaunched.words(SEVERAL.split("; all available", maxsplit=1)[0], own) == ""
    # Through the line, with the pod's namespace naming its pool's NodePools.
    pod = unschedulable_pod()
    pod["metadata"]["namespace"] = "physics"
    found = unlaunched.summary(huge_stage(pool="small"), 0, "fits", pod, [event(SEVERAL)], NOW)
    assert found is not None
    assert ('Karpenter found no node to launch for it: no instance type has enough '
            'resources, resources={"cpu":"1k","pods":"1"}; check') in found[1], found[1]


def test_the_line_names_the_pod_what_it_asks_the_pool_and_the_fix() -> None:
    st = huge_stage(pool="small")
    found = unlaunched.summary(st, 0, "fits", unschedulable_pod(), [
        event(SCHEDULER, component="default-scheduler", ago=1), event(RELAXED)], NOW)
    fix = ("check spec.stages[0].resources against pool 'small' of VirtualCluster 'fits': "
           "its instance sizes and maxCPU, maxMemory, maxNodes")
    assert found == (stalled.WAITING_FOR_NODES, (
        "stage s: its pods do not start: pod huge-s-1bc55c-0-fbq9r asks for cpu 1000: "
        f"Karpenter found no node to launch for it; {fix}"))
    # A NodePool's own reason is quoted, without its requirements.
    found = unlaunched.summary(st, 0, "fits", unschedulable_pod(), [event(ONE_POOL)], NOW)
    assert found is not None and found[1] == (
        "stage s: its pods do not start: pod huge-s-1bc55c-0-fbq9r asks for cpu 1000: "
        "Karpenter found no node to launch for it: no instance type met the scheduling "
        "requirements or had enough resources, "
        f'resources={{"cpu":"1k","pods":"1"}}; {fix}')
    assert len(found[1]) <= stalled.MESSAGE_CHARS
    # A long reason is cut, never the fix; a stage on the VirtualCluster's first pool.
    long = unlaunched.summary(huge_stage(), 0, "fits", unschedulable_pod(),
                              [event(ONE_POOL + " and more" * 40)], NOW)
    assert long is not None and len(long[1]) <= stalled.MESSAGE_CHARS
    assert long[1].endswith("its first pool of VirtualCluster 'fits': its instance sizes "
                            "and maxCPU, maxMemory, maxNodes"), long[1]
    assert "…; check" in long[1]


def test_without_karpenters_word_nothing_is_said() -> None:
    st, pod = huge_stage(pool="small"), unschedulable_pod()
    # It nominated a node after it had failed (a NodePool made meanwhile): one launches.
    nominated = {**event("Pod should schedule on: nodeclaim/fits-small-x2k", ago=2),
                 "reason": "Nominated", "type": "Normal"}
    assert unlaunched.summary(st, 0, "fits", pod, [event(RELAXED, ago=60), nominated],
                              NOW) is None
    assert unlaunched.summary(st, 0, "fits", pod, [nominated, event(RELAXED, ago=1)],
                              NOW) is not None
    assert unlaunched.summary(st, 0, "fits", pod, [], NOW) is None
    assert unlaunched.summary(st, 0, "fits", pod, [
        event(SCHEDULER, component="default-scheduler")], NOW) is None
    assert unlaunched.summary(st, 0, "fits", pod, [event(RELAXED, ago=3600)], NOW) is None


class PodsAndEvents:
    """The two LISTs a stalled read makes, and what it asked for."""

    def __init__(self, pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        self.pods, self.events = pods, events
        self.calls: list[tuple[str, str | None]] = []

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None) -> list[dict[str, Any]]:
        self.calls.append((kind, field_selector))
        return self.pods if kind == "Pod" else self.events


def _job() -> dict[str, Any]:
    return {"metadata": {"name": "huge-s-1bc55c", "uid": "j"}, "spec": {
        "selector": {"matchLabels": {"nightshift.io/pipeline-run": "huge"}}}}


def test_a_stall_reads_the_events_only_on_a_virtual_cluster() -> None:
    recent = {**event(RELAXED), "lastTimestamp": datetime.now(UTC).isoformat()}
    kube = PodsAndEvents([unschedulable_pod()], [recent])
    st = huge_stage(pool="small")
    found = observe._read_stall(kube, "physics", _job(), "pods", st, 0,  # type: ignore[arg-type]
                                "fits")
    assert found is not None and "Karpenter found no node to launch for it; check" in found[1]
    assert kube.calls[-1] == ("Event", "involvedObject.uid=u0")
    # Without a VirtualCluster no Karpenter launches for the pool: the scheduler's words.
    kube = PodsAndEvents([unschedulable_pod()], [recent])
    found = observe._read_stall(kube, "physics", _job(), "pods", st, 0)  # type: ignore[arg-type]
    assert found is not None and found[0] == stalled.WAITING_FOR_NODES
    assert "nodes may still be launching" in found[1]
    assert [k for k, _ in kube.calls] == ["Pod"]
    # Karpenter said nothing (it is launching a node): the scheduler's words stay.
    kube = PodsAndEvents([unschedulable_pod()], [])
    found = observe._read_stall(kube, "physics", _job(), "pods", st, 0,  # type: ignore[arg-type]
                                "fits")
    assert found is not None and "nodes may still be launching" in found[1]
