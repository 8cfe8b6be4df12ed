"""A Gluster client that cannot mount goes on trying (no crash loop, so the volume comes
back within seconds of its servers) and says why through its readiness probe; the
kubelet's Unhealthy event carries the probe's output, and the not-Ready storage quotes
it with where to look (observe.not_mounted, podstate.probe_says)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nightshift.api import names, podstate
from nightshift.sharedstorage import gluster
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.objects import COMPONENT_GLUSTER_CLIENT, COMPONENT_GLUSTER_SERVER
from nightshift.sharedstorage.observe import Sources, SquidSampler, observe
from tests.unit.test_chart_kubecalls import RecordingKube
from tests.unit.test_refusals import NOW
from tests.unit.test_sharedstorage_plan import converge, storage

WHY = "volume montage does not mount: failed to fetch volume file (key:/montage)"


def unhealthy(uid: str, message: str, ago_s: float = 20, count: int = 9) -> dict[str, Any]:
    at = (NOW - timedelta(seconds=ago_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"e-{uid}-{ago_s}", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "uid": uid}, "reason": "Unhealthy",
            "type": "Warning", "message": message, "count": count, "lastTimestamp": at}


def client_pod(name: str, ns: str, storage: str, *, ready: bool,
               component: str = COMPONENT_GLUSTER_CLIENT) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": ns, "uid": f"uid-{name}",
        "labels": {names.LABEL_STORAGE: storage, names.LABEL_COMPONENT: component}},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": str(ready)}],
                   "containerStatuses": [{"name": gluster.CLIENT_CONTAINER, "ready": ready,
                                          "restartCount": 0, "state": {"running": {}}}]}}


def test_the_probes_last_words_from_its_newest_unhealthy_event() -> None:
    events = [unhealthy("u", f"Readiness probe failed: {WHY}\n"),
              unhealthy("u", "Readiness probe failed: older words", ago_s=200),
              {**unhealthy("u", "Liveness probe failed: not this one", ago_s=1)}]
    assert podstate.probe_says(events, NOW) == WHY
    # Too old (the pod may be fine since), or a probe that printed nothing: no words.
    assert podstate.probe_says([unhealthy("u", f"Readiness probe failed: {WHY}", 3600)],
                               NOW) is None
    assert podstate.probe_says([unhealthy("u", "Readiness probe failed: ")], NOW) is None


def test_a_not_ready_gluster_storage_quotes_its_client_and_where_to_look() -> None:
    obj = storage("gluster-nufa")
    held, _ = converge(storage("gluster-nufa"))
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    obj["status"] = {"phase": "Pending"}
    pods = [client_pod(f"{name}-gluster-client-a", ns, name, ready=True),
            client_pod(f"{name}-gluster-client-b", ns, name, ready=False),
            client_pod(f"{name}-gluster-0", ns, name, ready=False,
                       component=COMPONENT_GLUSTER_SERVER)]
    events = [unhealthy(f"uid-{name}-gluster-client-b", f"Readiness probe failed: {WHY}\n"),
              # A server's probe is not a client's mount: never quoted as one.
              unhealthy(f"uid-{name}-gluster-0", "Readiness probe failed: glusterd down")]
    for e in events:
        e["metadata"]["namespace"] = ns
    kube = RecordingKube([obj, *held, *pods, *events])
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), ns, name, NOW)
    assert got is not None
    (found,) = got.pods_not_starting
    assert (found.pod, found.container, found.message) == (
        f"{name}-gluster-client-b", "glusterfs", WHY)
    (line,) = ssstatus.pods_not_starting("glusterfs", [found], ns)
    assert line == (
        f"pod {name}-gluster-client-b container glusterfs: NotMounted: {WHY}; it tries again "
        f"every 5 s; its log: kubectl logs -n {ns} {name}-gluster-client-b -c glusterfs; "
        "check spec.glusterfs, and that its node reaches the servers' nodes (glusterd's "
        "port 24007, the bricks' 49152 and up)")


def test_a_ready_storage_reads_no_events() -> None:
    obj = storage("gluster-nufa")
    held, _ = converge(storage("gluster-nufa"))
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    obj["status"] = {"phase": "Ready"}
    kube = RecordingKube([obj, *held, client_pod(f"{name}-gluster-client-b", ns, name,
                                                 ready=False)])
    got = observe(kube, Sources(sampler=SquidSampler(fetch=lambda url, t: "")), ns, name, NOW)
    assert got is not None and got.pods_not_starting == []
    assert not [c for c in kube.calls if "events" in str(c)]
