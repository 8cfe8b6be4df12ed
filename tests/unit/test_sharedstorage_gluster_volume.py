"""The glusterfs volume Job: where it runs, what it runs, and that its script is safe
to re-run (against a fake gluster CLI)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from nightshift.sharedstorage import gluster, glustervolume
from nightshift.sharedstorage.objects import Storage
from tests.bad_sharedstorages import GOOD
from tests.golden_util import check_golden
from tests.unit.test_sharedstorage_render import kind, pod_spec, render


def test_gluster_volume_job_runs_on_server_zero_with_its_socket() -> None:
    st = Storage.of(GOOD["gluster-nufa"])
    pods = [gluster.ServerPod(f"montage-gluster-{i}", f"10.0.2.{i}", True, f"node-{i}")
            for i in range(4)]
    job = glustervolume.volume_job(st, pods)
    assert job is not None
    check_golden("sharedstorage/gluster-nufa-volume-job.yaml", job)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "node-0"
    (sts,) = kind(render("gluster-nufa"), "StatefulSet")
    run_dir = next(v for v in pod_spec(sts)["volumes"] if v["name"] == "run")
    assert spec["volumes"] == [{"name": "run", "hostPath": {
        "path": run_dir["hostPath"]["path"], "type": "Directory"}}]
    script = spec["containers"][0]["command"][2]
    # Every command of volume_commands is in the script, probes before the create.
    for c in gluster.volume_commands(st, pods):
        assert shlex.join(c.argv) in script
    assert script.index("peer probe") < script.index("volume create")
    assert "volume start" in script.split("fi\n", 1)[1], "a stopped volume is started"
    # Until every server is ready (and placed), there is no Job.
    assert glustervolume.volume_job(st, pods[:3]) is None
    assert glustervolume.volume_job(st, [*pods[1:], gluster.ServerPod(
        "montage-gluster-0", "10.0.2.0", True)]) is None


def _nufa_script() -> str:
    """The volume Job's script for gluster-nufa's four ready servers."""
    st = Storage.of(GOOD["gluster-nufa"])
    pods = [gluster.ServerPod(f"montage-gluster-{i}", f"10.0.2.{i}", True, f"n{i}")
            for i in range(4)]
    job = glustervolume.volume_job(st, pods)
    assert job is not None
    return str(job["spec"]["template"]["spec"]["containers"][0]["command"][2])


def test_gluster_volume_script_runs_and_is_idempotent(tmp_path: Path) -> None:
    """The script against a fake `gluster` CLI that keeps a volume's state in files:
    the first run probes, creates, sets nufa and starts; a second run does nothing but
    read; a created but stopped volume is only started."""
    script = _nufa_script()
    state, log = tmp_path / "state", tmp_path / "log"
    state.mkdir()
    fake = tmp_path / "gluster"
    fake.write_text(f"""#!/bin/sh
shift  # --mode=script
echo "$*" >> {log}
case "$1 $2" in
  "pool list") exit 0 ;;
  "peer probe") touch {state}/peer-$3 ;;
  "peer status") for p in {state}/peer-*; do
                   [ -e "$p" ] && echo "State: Peer in Cluster (Connected)"
                 done; exit 0 ;;
  "volume info") [ -e {state}/created ] || exit 1
                 [ -e {state}/started ] && echo "Status: Started" || echo "Status: Created" ;;
  "volume create") touch {state}/created ;;
  "volume start") touch {state}/started ;;
esac
""")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}

    def run() -> list[str]:
        log.write_text("")
        subprocess.run(["/bin/sh", "-c", script], env=env, check=True, capture_output=True,
                       timeout=30)
        return [line.split(" ")[0] + " " + line.split(" ")[1]
                for line in log.read_text().splitlines()]

    first = run()
    assert first.count("peer probe") == 3
    assert [c for c in first if c.startswith("volume") and c != "volume info"] == [
        "volume create", "volume set", "volume start"]
    assert [c for c in run() if c not in ("pool list", "volume info")] == []
    (state / "started").unlink()
    assert [c for c in run() if c not in ("pool list", "volume info")] == ["volume start"]


def test_a_glusterd_that_never_answers_fails_the_job_with_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Server pod 0's glusterd never answers (its pod made again elsewhere, a socket
    that is not there): the script gives up after GLUSTERD_WAIT_S, saying so, so the Job
    fails and the storage's status points at its log, instead of "making the volume"
    for ever."""
    monkeypatch.setattr(glustervolume, "GLUSTERD_WAIT_S", 2)
    script = _nufa_script()
    fake = tmp_path / "gluster"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    done = subprocess.run(["/bin/sh", "-c", script], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                          check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "glusterd did not answer in 2 s"


def test_the_client_mounts_from_addresses_never_long_names() -> None:
    """mount.glusterfs drops a server name over 63 characters, as cluster DNS names of
    server pods often are: the client resolves each to an IPv4 address (else keeps the
    name), the Service first, and passes them all as the source, in order."""
    st = Storage.of(GOOD["gluster-nufa"])
    (cm,) = [o for o in kind(render("gluster-nufa"), "ConfigMap")
             if "mount.sh" in o.get("data", {})]
    script = cm["data"]["mount.sh"]
    assert "backup-volfile-servers" not in script
    names = script.split('names="', 1)[1].split('"', 1)[0].split()
    assert names == [gluster.service_host(st), *(
        f"montage-gluster-{i}.{gluster.service_host(st)}" for i in range(4))]
    assert '"$list:/montage"' in script
    # The resolver, run as written: an address where there is one, else the name.
    resolver = script.split("\naddresses() {", 1)[1].split("\n}\n", 1)[0]
    got = subprocess.run(["/bin/sh", "-c", 'names="localhost nosuch.invalid"\naddresses() {'
                          + resolver + "\n}\naddresses"], capture_output=True, text=True,
                         check=True, timeout=30)
    assert got.stdout == "127.0.0.1,nosuch.invalid\n"
