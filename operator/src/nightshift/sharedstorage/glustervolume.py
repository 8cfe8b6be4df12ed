"""The Job that creates and starts a glusterfs SharedStorage's volume. Pure.

Why a Job and not `exec` into a server pod from the operator: an exec is a streaming
connection held by the operator for the command's whole run, lost (with no record of
how far it got) when the operator restarts, and it needs `pods/exec`, which lets its
holder run anything in any pod of the namespace. A Job runs next to the servers
without the operator, retries on its own, and stays as the record: succeeded means
the volume exists and is started, and its log is the gluster CLI's output.

glusterd serves its full CLI (create, start, set) only on its unix socket, never over
TCP, so the Job runs on server pod 0's node and mounts the host directory that server
keeps its runtime directory (and socket) in (gluster.run_host_dir).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from nightshift.sharedstorage.gluster import (
    APP,
    GLUSTER,
    IMAGE,
    RUN_IN_POD,
    Exec,
    ServerPod,
    run_host_dir,
    volume_commands,
    volume_job_name,
    volume_name,
)
from nightshift.sharedstorage.objects import COMPONENT_GLUSTER_VOLUME, Storage, pool_tolerations

# Attempts of the Job's pod before the Job fails (the script is safe to re-run).
BACKOFF = 3
# Seconds the script waits for probed peers to join the pool.
PEER_WAIT_S = 120
# Seconds it waits for server pod 0's glusterd to answer: past that the Job fails (its
# pods retried BACKOFF times), and the storage's status says so, rather than "making the
# volume" for ever.
GLUSTERD_WAIT_S = 300
JOINED = "Peer in Cluster (Connected)"


def volume_script(st: Storage, commands: Sequence[Exec]) -> str:
    """The volume Job's shell script: `commands` (from volume_commands), made safe to
    re-run. A volume that exists is not created again; one that is not started is
    started; probed peers must have joined the pool before the create names their
    bricks."""
    g = st.spec.glusterfs
    assert g is not None  # noqa: S101  (invariant for mypy: a glusterfs storage)
    vol = shlex.quote(volume_name(st))
    cli = " ".join(GLUSTER)
    probes = [shlex.join(c.argv) for c in commands if c.argv[2:4] == ["peer", "probe"]]
    make = [shlex.join(c.argv) for c in commands
            if c.argv[2:4] in (["volume", "create"], ["volume", "set"])]
    peers = g.servers - 1
    lines = [
        "set -eu",
        "waited=0",
        f"until {cli} pool list >/dev/null 2>&1; do",
        '  echo "waiting for glusterd"; waited=$((waited + 2))',
        f"  [ $waited -le {GLUSTERD_WAIT_S} ] || {{ echo \"glusterd did not answer in "
        f"{GLUSTERD_WAIT_S} s\" >&2; exit 1; }}",
        "  sleep 2",
        "done",
        f"if {cli} volume info {vol} >/dev/null 2>&1; then",
        f"  echo \"volume {volume_name(st)} exists\"",
        "else",
        *[f"  {c}" for c in probes],
        "  waited=0",
        f"  until [ \"$({cli} peer status | grep -c '{JOINED}')\" -ge {peers} ]; do",
        "    waited=$((waited + 2))",
        f"    [ $waited -le {PEER_WAIT_S} ] || {{ {cli} peer status; exit 1; }}",
        "    sleep 2",
        "  done",
        *[f"  {c}" for c in make],
        "fi",
        f"{cli} volume info {vol} | grep -q '^Status: Started' || {cli} volume start {vol}",
        f"{cli} volume info {vol}",
        "",
    ]
    return "\n".join(lines)


def volume_job(st: Storage, servers: Sequence[ServerPod]) -> dict[str, Any] | None:
    """The Job that creates and starts the volume, or None until every server is ready.

    It runs the gluster CLI on server pod 0's node, against that pod's glusterd through
    the shared runtime directory. The Job is the record: succeeded means the volume
    exists and is started; its log is the CLI's output. Its template pins a node, so it
    is made once and never re-applied (a Job's template is immutable).
    """
    commands = volume_commands(st, servers)
    g = st.spec.glusterfs
    if not commands or g is None:
        return None
    first = next(s for s in servers if s.name == commands[0].pod)
    if not first.node:
        return None
    script = volume_script(st, commands)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": st.metadata("gluster-volume", COMPONENT_GLUSTER_VOLUME, APP),
        "spec": {
            "backoffLimit": BACKOFF,
            "template": {
                "metadata": {"labels": st.labels(COMPONENT_GLUSTER_VOLUME, APP)},
                "spec": {
                    "restartPolicy": "Never",
                    # Not scheduled: it must share the node (and runtime directory) of
                    # server pod 0.
                    "nodeName": first.node,
                    "tolerations": pool_tolerations(st, [g.pool]),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "containers": [{
                        "name": "volume",
                        "image": IMAGE,
                        "command": ["/bin/sh", "-c", script],
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                        "volumeMounts": [{"name": "run", "mountPath": RUN_IN_POD}],
                    }],
                    "volumes": [{"name": "run", "hostPath": {"path": run_host_dir(st),
                                                             "type": "Directory"}}],
                },
            },
        },
    }


def job_state(st: Storage, job: Mapping[str, Any] | None) -> list[str]:
    """What the volume Job's state adds to a not-Ready storage: none once it succeeded."""
    name = volume_job_name(st)
    if job is None:
        return [f"the volume is made once every server is ready (Job {name})"]
    js = job.get("status") or {}
    if int(js.get("succeeded") or 0) >= 1:
        return []
    if any(c.get("type") == "Failed" and c.get("status") == "True"
           for c in js.get("conditions") or []):
        return [f"Job {name}, which makes the volume, failed: see kubectl logs -n "
                f"{st.namespace} job/{name}; delete the Job to try again"]
    return [f"making the volume (Job {name})"]
