"""GlusterFS for real, on the local cluster's real node (containerd + kubelet), from the
objects the renderers make, placed on the real node with the images `make images` loads
(realstorage.py); test_sharedstorage_real.py has squid and nfs-ganesha.

glusterd in the rendered StatefulSet (host network), the volume made by the rendered
Job through the server's socket, the rendered client DaemonSet's FUSE mount
(Bidirectional), and a pod writing and reading through it (the clients' claim, a
PersistentVolume of the node's mount, HostToContainer), for a distribute and a nufa
volume (one at a time, in this one file: one glusterd per node); the server pod killed
mid-write.

Skipped without the real node or its images (`make images`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nightshift.api import names
from nightshift.pipelinerun import binding, fusewait
from nightshift.pipelinerun import items as it
from nightshift.pipelinerun.spec import PipelineRunSpec
from nightshift.sharedstorage import gluster, glustervolume, observe
from nightshift.sharedstorage import status as ssstatus
from nightshift.sharedstorage.objects import COMPONENT_GLUSTER_CLIENT, Storage
from nightshift.sharedstorage.plantypes import server_pod
from nightshift_localcluster.nodeconfig import NODE_NAME
from tests.clusterutil import Kubectl, wait_for
from tests.integration.realstorage import RUNNER, TAG, need_image, place
from tests.integration.test_real_node import (
    pod_job,
    real_node,
    run_stage,
    start_stage,
    wait_job,
)

__all__ = ["real_node"]


# -- glusterfs ---------------------------------------------------------------------------

WRITE_READ = """
set -e
d=/data/$(hostname)
mkdir -p $d
for i in $(seq 1 200); do head -c 4096 /dev/urandom > $d/f$i; done
sha256sum $d/* > /tmp/sums
sync
sha256sum -c /tmp/sums >/dev/null
echo "files=$(ls $d | wc -l) bytes=$(du -sb $d | cut -f1)"
"""


def gluster_pv(st: Storage) -> str:
    return st.cluster_name("gluster")


@pytest.mark.parametrize("layout", ["distribute", "nufa"])
def test_real_glusterd_volume_fuse_mount_and_pod_io(
        real_node: dict[str, Any], kubectl: Kubectl, namespace: str, layout: str) -> None:
    need_image(real_node, f"{gluster.IMAGE}:{TAG}")
    name = f"g{layout[:4]}{uuid.uuid4().hex[:4]}"
    # The real node is this host: a host directory for the bricks, removed after.
    # GlusterFS keeps new files off a brick with less than cluster.min-free-disk (10 %)
    # free: DHT then writes every file to one brick, with pointers on the other, and the
    # placement checks below would fail for the host's reason, not ours (seen here at
    # 8.7 % free). Checked on the bricks' parent before making them, so a refusal leaves
    # no directory behind.
    bricks_parent = tempfile.gettempdir()
    usage = shutil.disk_usage(bricks_parent)
    if usage.free < 0.11 * usage.total:
        pytest.fail(f"the filesystem of {bricks_parent} has "
                    f"{100 * usage.free / usage.total:.1f} % free, under GlusterFS's "
                    "cluster.min-free-disk (10 %): free disk space and run the test again")
    brick_root = tempfile.mkdtemp(prefix="nightshift-gluster-test-", dir=bricks_parent)
    obj = {"metadata": {"name": name, "namespace": namespace, "uid": "u"},
           "spec": {"type": "glusterfs", "glusterfs": {
               "layout": layout, "pool": "real", "servers": 1, "bricksPerNode": 2,
               "brickPath": brick_root, "clients": {"pools": ["real"]}}}}
    st = Storage.of(obj)
    # Whatever fails, the server stops before its bricks go (it would write them again),
    # and neither the cluster-scoped PV nor the host directory outlives the test.
    try:
        gluster_volume_and_pod_io(kubectl, namespace, layout, st, obj, Path(brick_root))
    finally:
        try:
            remove_gluster(kubectl, namespace, st)
        finally:
            shutil.rmtree(brick_root, ignore_errors=True)


def gluster_volume_and_pod_io(kubectl: Kubectl, namespace: str, layout: str, st: Storage,
                              obj: dict[str, Any], brick_root: Path) -> None:
    name = st.name
    objs = place(gluster.render_gluster(st))
    for o in objs:
        kubectl.apply(o)
    kubectl("-n", namespace, "rollout", "status", f"statefulset/{name}-gluster",
            "--timeout=180s")
    # Before its volume exists the client cannot mount, and its log says why: the
    # glusterfs client's own errors, not only mount.glusterfs's "Mount failed".
    def why() -> str | None:
        out = kubectl("logs", "-n", namespace, f"daemonset/{name}-gluster-client",
                      check=False).stdout
        # Once the server's name resolves, the client passes its address (mount.glusterfs
        # drops names over 63 characters, and tried a server called "SyntaxOK" instead).
        last = out[out.rfind("Mounting glusterfs"):]
        return last if " E [" in last and "not mountable yet (servers 10." in last else None

    said = wait_for("the client's reason in its log", why, 120)
    print("the client before its volume:", said[-700:])
    assert "SyntaxOK" not in said, said
    # ... and so does the storage's status: the client's readiness probe prints its last
    # failure, which the real kubelet's Unhealthy event carries (observe.not_mounted).
    def not_mounted() -> str | None:
        running = kubectl.kube.list("v1", "Pod", namespace, field_selector="status.phase=Running",
                                    label_selector=f"{names.LABEL_STORAGE}={name}")
        found = observe.not_mounted(kubectl.kube, namespace, running, datetime.now(UTC))
        line = ssstatus.pods_not_starting("glusterfs", found, namespace)[0] if found else ""
        # Before the servers' names resolve, it says so ("DNS resolution failed on host").
        return line if "failed to fetch volume file" in line else None

    line = wait_for("the client's reason in the storage's status", not_mounted, 120)
    print("the storage says:", line)
    # A probe that runs while a failed mount's FUSE point lingers also prints stat's
    # "Transport endpoint is not connected" between the reason and the fix: true, and
    # not what this asserts.
    assert (f" container glusterfs: NotMounted: volume {name} does not mount: failed to fetch "
            f"volume file (key:/{name});") in line, line
    assert "; it tries again every 5 s; its log: kubectl logs" in line, line
    pod = json.loads(kubectl("get", "pod", f"{name}-gluster-0", "-n", namespace, "-o",
                             "json").stdout)
    job = glustervolume.volume_job(st, [server_pod(pod)])
    assert job is not None and job["spec"]["template"]["spec"]["nodeName"] == NODE_NAME
    (job,) = place([job])
    kubectl.apply(job)
    wait_job(kubectl, f"{name}-gluster-volume", namespace, timeout=180)
    info = kubectl("logs", f"job/{name}-gluster-volume", "-n", namespace).stdout
    print(info)
    assert "Status: Started" in info and "Number of Bricks: 2" in info
    if layout == "nufa":
        assert "cluster.nufa: on" in info
    # OnDelete (a client restart would take the mount from under running pods), so no
    # `rollout status`: wait for its pod on the real node to be Ready.
    def client_state() -> str:
        """What the client pod and its log say, for a timeout to be a diagnosis."""
        pods = kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
        log = kubectl("logs", "-n", namespace, f"daemonset/{name}-gluster-client",
                      "--tail=30", check=False).stdout
        events = kubectl("get", "events", "-n", namespace, "--field-selector",
                         "reason=Unhealthy", check=False).stdout
        return f"{pods}\n--- client log ---\n{log}\n--- Unhealthy events ---\n{events}"

    wait_for("the gluster client Ready", lambda: ((kubectl.kube.get(
        "apps/v1", "DaemonSet", f"{name}-gluster-client", namespace) or {}).get(
        "status") or {}).get("numberReady") == 1, 180, explain=client_state)
    volume, mount = gluster.pod_volume(st, "/data")
    kubectl.apply(pod_job("io", namespace, {
        "image": RUNNER, "command": ["sh", "-c", WRITE_READ], "volumeMounts": [mount]},
        volumes=[volume]))
    wait_job(kubectl, "io", namespace, timeout=180)
    out = kubectl("logs", "job/io", "-n", namespace).stdout
    print(layout, out)
    assert "files=200" in out
    # A PipelineRun's stage Job (rendered as the operator renders it, the storage entry
    # naming this SharedStorage): its non-root pods commit outputs through the volume,
    # and its step writes to the volume itself (stages[].mounts), once run.sh saw the
    # FUSE mount there (pipelinerun/fusewait.py). The task records go there too
    # (spec.archive): stage-in's first one, read-write through its own FUSE wait, then
    # the sidecar's.
    spec = binding.bind(write_stage(name, "sh", "-c", 'echo "$NIGHTSHIFT_ITEM" > '
                                    '"$NIGHTSHIFT_OUTPUTS/item.txt" && echo "$NIGHTSHIFT_ITEM"'
                                    ' > "/shared/seen-$NIGHTSHIFT_ITEM"', archive=True),
                        {name: obj}, namespace).spec
    run_stage(kubectl, spec, namespace, "rg", ["a", "b"])
    bricks = [brick_root / f"{namespace}-{name}" / f"brick{b}" for b in (0, 1)]
    for index, item in enumerate(("a", "b")):
        records = [json.loads(p.read_text()) for b in bricks
                   for p in (b / "_nightshift" / "rg" / "write").glob(f"{index}.json")
                   if p.stat().st_size > 0]
        assert [(r["item"], r["attempt"], r["phase"], r["previousAttempts"])
                for r in records] == [(item, 1, "succeeded", [])], records
    for item in ("a", "b"):
        committed = [p for b in bricks for p in (b / "out" / item).glob("item.txt")
                     if p.stat().st_size > 0]
        assert [p.read_text() for p in committed] == [f"{item}\n"], (item, committed)
        seen = [p for b in bricks for p in b.glob(f"seen-{item}") if p.stat().st_size > 0]
        assert [p.read_text() for p in seen] == [f"{item}\n"], (item, seen)
    # The files are on the bricks (host directories): data files, and DHT's zero-size
    # pointers where a file's hash names another brick than the one holding it.
    files = [[p for d in b.iterdir() if d.is_dir() and d.name != ".glusterfs"
              for p in d.glob("f*")] for b in bricks]
    data = [sum(1 for p in fs if p.stat().st_size > 0) for fs in files]
    pointers = [sum(1 for p in fs if p.stat().st_size == 0) for fs in files]
    print(layout, "data files per brick", data, "pointers", pointers)
    assert sum(data) == 200
    if layout == "distribute":
        assert min(data) > 0 and pointers == [0, 0], "hashed over both bricks"
    else:
        # NUFA: every new file on the writer's first local brick; on one node with two
        # bricks that is brick0, with pointers on brick1 for names hashed there.
        assert data == [200, 0] and pointers[1] > 0
    if layout == "distribute":
        server_killed_mid_write(kubectl, namespace, name, volume, mount)
        client_gone_items_fail_instead_of_writing_to_the_node(kubectl, namespace, name, obj)


def write_stage(storage: str, *command: str, archive: bool = False,
                **stage: Any) -> PipelineRunSpec:
    """One stage of two items that commits outputs to `storage` and sees it at /shared
    (`archive`: its task records there too)."""
    return PipelineRunSpec.model_validate({
        "storage": [{"name": "scratch", "sharedStorage": storage}],
        **({"archive": {"storage": "scratch"}} if archive else {}),
        "stages": [{"name": "write", "image": RUNNER, "forEach": {"items": ["a", "b"]},
                    "outputs": [{"storage": "scratch", "path": "out/{item}/"}],
                    "mounts": [{"storage": "scratch", "mountPath": "/shared",
                                "readOnly": False}],
                    "steps": [{"name": "make", "command": list(command)}], **stage}]})


def client_gone_items_fail_instead_of_writing_to_the_node(
        kubectl: Kubectl, namespace: str, name: str, obj: dict[str, Any]) -> None:
    """The client DaemonSet deleted: its pod unmounts the volume and the node directory
    stays, empty. A stage using the storage then fails its items as transient, with
    run.sh's line naming the path, and writes nothing to the node's directory."""
    kubectl("-n", namespace, "delete", "daemonset", f"{name}-gluster-client", "--wait=true",
            "--timeout=120s")
    st = Storage.of(obj)
    clients = ",".join(f"{k}={v}" for k, v in st.selector(COMPONENT_GLUSTER_CLIENT).items())
    wait_for("the client pod gone", lambda: not kubectl.kube.list(
        "v1", "Pod", namespace, label_selector=clients), 120)
    spec = binding.bind(write_stage(name, "sh", "-c", "echo wrote > /shared/unmounted",
                                    retries={"perItem": 0},
                                    env=[{"name": names.ENV_FUSE_WAIT_S, "value": "4"}]),
                        {name: obj}, namespace).spec
    job = start_stage(kubectl, spec, namespace, "rgone", ["a", "b"])
    wait_for(f"job {job} Failed", lambda: any(
        c["type"] == "Failed" and c["status"] == "True" for c in ((kubectl.kube.get(
            "batch/v1", "Job", job, namespace) or {}).get("status") or {}).get(
                "conditions", [])), 180)
    pods = kubectl.kube.list("v1", "Pod", namespace, label_selector=it.job_pods_selector(
        kubectl.kube.get("batch/v1", "Job", job, namespace) or {}))
    said = [s["state"]["terminated"] for p in pods
            for s in p["status"].get("containerStatuses", []) if s["name"] == "make"]
    print("client gone:", said)
    assert len(said) == 2 and all(
        s["exitCode"] == fusewait.EX_TEMPFAIL
        and "nightshift: /shared is not mounted in this pod after 4 s" in s.get("message", "")
        for s in said), pods
    assert not (Path(gluster.client_host_dir(st)) / "unmounted").exists()


def remove_gluster(kubectl: Kubectl, namespace: str, st: Storage) -> None:
    name = st.name
    for kind, obj_name in (("job", "io"), ("job", "writer"),
                           ("daemonset", f"{name}-gluster-client"),
                           ("statefulset", f"{name}-gluster"),
                           ("job", f"{name}-gluster-volume")):
        kubectl("-n", namespace, "delete", kind, obj_name, "--wait=true", "--timeout=120s",
                check=False)
    wait_for("the server pod gone", lambda: kubectl.kube.get(
        "v1", "Pod", f"{name}-gluster-0", namespace) is None, 120)
    # The clients' PersistentVolume is cluster-scoped: not removed with the namespace.
    kubectl("delete", "pv", gluster_pv(st), "--wait=false", check=False)


# A writer that keeps going through an outage: each file written, read back and
# compared; a failed one is reported (never silently dropped), then every file reported
# good is checked again at the end, after the server came back.
WRITER = """
set -u
mkdir -p /data/w
: > /tmp/good
i=0; good=0; bad=0; end=$(( $(date +%s) + 50 ))
while [ "$(date +%s)" -lt "$end" ]; do
  i=$((i + 1))
  head -c 65536 /dev/urandom > /tmp/b
  if timeout 60 cp /tmp/b /data/w/f$i 2>/tmp/err && timeout 60 cmp -s /tmp/b /data/w/f$i
  then
    echo "$(sha256sum < /tmp/b | cut -c1-64)  /data/w/f$i" >> /tmp/good; good=$((good + 1))
  else
    bad=$((bad + 1)); echo "f$i failed at $(date +%s): $(head -c 200 /tmp/err)"
  fi
  sleep 0.1
done
if sha256sum -c --quiet /tmp/good; then verify=ok; else verify=FAILED; fi
echo "good=$good bad=$bad verify=$verify last_ok=$(tail -n 1 /tmp/good | cut -d/ -f4)"
"""


def server_killed_mid_write(kubectl: Kubectl, namespace: str, name: str,
                            volume: dict[str, Any], mount: dict[str, Any]) -> None:
    """The server pod (glusterd and both bricks) killed while a pod writes: writes in the
    outage fail with an error the writer sees, the StatefulSet brings the pod back with
    the volume (its state is on the node), the client reconnects, and every write that
    had succeeded is intact. Without a replica there is no availability in the outage."""
    kubectl.apply(pod_job("writer", namespace, {
        "image": RUNNER, "command": ["sh", "-c", WRITER], "volumeMounts": [mount]},
        volumes=[volume]))
    wait_for("the writer running", lambda: [p["status"].get("phase") for p in kubectl.kube.list(
        "v1", "Pod", namespace, label_selector="job-name=writer")][:1] == ["Running"], 60)
    time.sleep(8)
    kubectl("-n", namespace, "delete", "pod", f"{name}-gluster-0", "--grace-period=0",
            "--force")
    kubectl("-n", namespace, "rollout", "status", f"statefulset/{name}-gluster",
            "--timeout=120s")
    wait_job(kubectl, "writer", namespace, timeout=150)
    out = kubectl("logs", "job/writer", "-n", namespace).stdout
    print("brick pod killed mid-write:", out[-1500:])
    summary = out.strip().splitlines()[-1]
    fields = dict(f.split("=", 1) for f in summary.split())
    assert fields["verify"] == "ok", out
    # Written before the kill, failed (visibly) while the bricks were gone, written
    # again once the client reconnected: the last file of the run is a good one.
    assert int(fields["good"]) > 0 and int(fields["bad"]) > 0, out
    assert fields["last_ok"] == f"f{int(fields['good']) + int(fields['bad'])}", out
