"""The steps wait for the node FUSE mounts they use (pipelinerun/fusewait.py): a glusterfs
or cvmfs storage in `stages[].mounts` is a node directory that exists whether or not the
node's client mounted it, so run.sh (in a real dash here) waits until /proc/self/mountinfo
shows a FUSE mount at each path, then fails the item as transient (exit 75) with a line
that says where; MPI workers and launchers wait the same way, and the runner's stage-in
waits for its own glusterfs storages."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nightshift.api import names
from nightshift.api.runnerwire import RunnerConfig
from nightshift.pipelinerun import binding, fusewait, jobs, mpijob
from nightshift.pipelinerun import items as render_items
from nightshift.pipelinerun.spec import Mpi, PipelineRunSpec
from nightshift.runner import mounts
from tests.bad_sharedstorages import GOOD

RUN = render_items.RunRef(name="r", namespace="ns", uid="u")
SHARED = {"montage": GOOD["gluster-nufa"], "software": GOOD["cvmfs-local"],
          "raw": GOOD["nfs-dedicated"]}
STORAGE = [{"name": "scratch", "sharedStorage": "montage"},
           {"name": "sw", "sharedStorage": "software"},
           {"name": "nfs", "sharedStorage": "raw"},
           {"name": "claim", "pvc": {"claimName": "c"}}]
ROOT = "1210 1101 0:341 / / rw,relatime master:512 - overlay overlay rw,lowerdir=/l\n"
SCRATCH_DISK = ("1221 1210 259:1 /var/lib/nightshift/gluster/ns-montage /scratch rw,relatime "
                "master:9 - ext4 /dev/nvme0n1p1 rw\n")
SCRATCH_FUSE = ("1240 1221 0:77 / /scratch rw,relatime master:40 - fuse.glusterfs "
                "10.0.2.1:ns-montage rw,user_id=0,group_id=0\n")
REPO_FUSE = ("1241 1230 0:78 / /cvmfs/demo.nightshift.io ro,relatime master:41 - fuse cvmfs2 "
             "ro,user_id=0\n")


def bound(mounts: list[dict[str, Any]], **stage: Any) -> PipelineRunSpec:
    spec = PipelineRunSpec.model_validate({"storage": STORAGE, "stages": [
        {"name": "s", "image": "busybox", "mounts": mounts, **stage,
         "steps": [{"name": "main", "command": ["true"]}]}]})
    b = binding.bind(spec, SHARED, "ns")
    assert not b.problems and not b.missing, (b.problems, b.missing)
    return b.spec


def fuse_of(spec: PipelineRunSpec) -> list[str]:
    return binding.fuse_mounts(spec.stages[0], {s.name: s for s in spec.storage})


def test_which_mounts_are_waited_for() -> None:
    spec = bound([{"storage": "scratch", "mountPath": "/scratch/", "readOnly": False},
                  {"storage": "sw"},
                  {"storage": "sw", "mountPath": "/opt/sw"},
                  {"storage": "nfs", "mountPath": "/nfs"},
                  {"storage": "claim", "mountPath": "/data"}])
    # Gluster: the mount itself; cvmfs: each repository under it; never NFS or a claim
    # (the kubelet mounts those itself).
    assert fuse_of(spec) == ["/scratch", "/cvmfs/demo.nightshift.io",
                             "/opt/sw/demo.nightshift.io"]
    assert fuse_of(bound([{"storage": "nfs", "mountPath": "/nfs"}])) == []


@pytest.mark.parametrize("path", ["/opt/my sw", "/opt/sw:1", "/opt/tab\there", "/opt/back\\slash"])
def test_a_fuse_mount_path_that_mountinfo_escapes_is_refused_naming_the_field(path: str) -> None:
    spec = PipelineRunSpec.model_validate({"storage": STORAGE, "stages": [
        {"name": "s", "image": "busybox", "steps": [{"name": "main", "command": ["true"]}],
         "mounts": [{"storage": "scratch", "mountPath": "/ok"},
                    {"storage": "sw", "mountPath": path},
                    {"storage": "claim", "mountPath": path}]}]})
    b = binding.bind(spec, SHARED, "ns")
    # Only the cvmfs mount: the kubelet mounts a claim itself, so nothing waits for it.
    assert [p.path for p in b.problems] == ["spec.stages[0].mounts[1].mountPath"]
    (problem,) = b.problems
    assert "which the wait for the node's cvmfs mount cannot read" in problem.message
    assert problem.message.endswith(": choose a path without them, e.g. /opt/"
                                    + path[5:].replace(" ", "-").replace(":", "-")
                                    .replace("\t", "-").replace("\\", "-"))


def test_the_paths_travel_in_the_stage_env_file_only_when_there_are_some() -> None:
    (cm,) = render_items.items_configmaps(RUN, "s", ["a"], last_step="main",
                                          fuse_mounts=["/scratch", "/cvmfs/x.org"])
    assert f"{names.ENV_FUSE_MOUNTS}=/scratch:/cvmfs/x.org\n" in cm["data"][names.STAGE_ENV_KEY]
    (plain,) = render_items.items_configmaps(RUN, "s", ["a"], last_step="main")
    assert names.ENV_FUSE_MOUNTS not in plain["data"][names.STAGE_ENV_KEY]


def wait_script(mountinfo: Path) -> str:
    # The same text run.sh carries, reading a file the test writes instead of the kernel's.
    text = fusewait.SH_FUSE_WAIT.replace("/proc/self/mountinfo", str(mountinfo))
    assert text != fusewait.SH_FUSE_WAIT
    return "set -eu\n" + text + "echo STEP RAN\n"


def sh(script: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_mounted_paths_pass_at_once(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(ROOT + SCRATCH_DISK + SCRATCH_FUSE + REPO_FUSE)
    got = sh(wait_script(info), {names.ENV_FUSE_MOUNTS: "/scratch:/cvmfs/demo.nightshift.io",
                                 names.ENV_FUSE_WAIT_S: "0"})
    assert (got.returncode, got.stdout, got.stderr) == (0, "STEP RAN\n", "")
    got = sh(wait_script(info), {})  # nothing to wait for
    assert (got.returncode, got.stdout) == (0, "STEP RAN\n")


def test_a_path_still_on_the_nodes_disk_fails_the_item_as_transient(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(ROOT + SCRATCH_DISK + REPO_FUSE)
    got = sh(wait_script(info), {names.ENV_FUSE_MOUNTS: "/cvmfs/demo.nightshift.io:/scratch",
                                 names.ENV_FUSE_WAIT_S: "0"})
    assert got.returncode == fusewait.EX_TEMPFAIL and "STEP RAN" not in got.stdout
    assert got.stderr == (
        "nightshift: /scratch is not mounted in this pod after 0 s (it is on ext4): the "
        "node's glusterfs or cvmfs SharedStorage client has not mounted it, and the step "
        "would see an empty directory; the item is retried (exit 75). See the "
        "SharedStorage's status.clients and its client pod on this node\n")
    # A repository with no entry at all: a directory of the /cvmfs claim, the node's disk.
    info.write_text(ROOT)
    got = sh(wait_script(info), {names.ENV_FUSE_MOUNTS: "/cvmfs/demo.nightshift.io",
                                 names.ENV_FUSE_WAIT_S: "0"})
    assert got.returncode == fusewait.EX_TEMPFAIL
    assert "(it is on the node's own disk)" in got.stderr


def test_a_mount_that_comes_while_waiting_lets_the_step_run(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(ROOT + SCRATCH_DISK)

    def client_mounts() -> None:
        time.sleep(1.5)
        with info.open("a") as f:  # a later mount on the same point: listed after
            f.write(SCRATCH_FUSE)

    t = threading.Thread(target=client_mounts)
    t.start()
    got = sh(wait_script(info), {names.ENV_FUSE_MOUNTS: "/scratch",
                                 names.ENV_FUSE_WAIT_S: "30"})
    t.join()
    assert (got.returncode, got.stdout, got.stderr) == (0, "STEP RAN\n", "")


def test_an_image_without_sleep_fails_at_once_rather_than_spin(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(ROOT)
    got = subprocess.run(["/bin/sh", "-c", wait_script(info)], capture_output=True, text=True,
                         timeout=30, check=False,
                         env={"PATH": str(tmp_path), names.ENV_FUSE_MOUNTS: "/scratch"})
    assert got.returncode == fusewait.EX_TEMPFAIL and "after 0 s" in got.stderr


def test_run_sh_waits_before_the_step_with_the_kernels_mountinfo(tmp_path: Path) -> None:
    """The whole run.sh, reading this process's own /proc/self/mountinfo: / is never a
    FUSE mount here, so the item fails before its step; without the key, the step runs."""
    folder = tmp_path / "items"
    folder.mkdir()
    out = tmp_path / "ran"

    def run(fuse: list[str]) -> subprocess.CompletedProcess[str]:
        for cm in render_items.items_configmaps(RUN, "s", ["a"], last_step="main",
                                                fuse_mounts=fuse):
            for key, value in cm["data"].items():
                (folder / key).write_text(value)
        return subprocess.run(
            ["/bin/sh", str(folder / names.RUN_SH_KEY), "main", "--", "/bin/sh", "-c",
             f'echo "$NIGHTSHIFT_ITEM" > {out}'], capture_output=True, text=True, timeout=60,
            check=False, env={"PATH": "/usr/bin:/bin", names.ENV_COMPLETION_INDEX: "0",
                              names.ENV_FUSE_WAIT_S: "0"})

    got = run(["/"])
    assert got.returncode == fusewait.EX_TEMPFAIL and not out.exists(), got
    assert got.stderr.startswith("nightshift: / is not mounted in this pod")
    got = run([])
    assert got.returncode == 0 and out.read_text() == "a\n", got


def test_mpi_workers_and_launcher_wait_for_the_mounts_too() -> None:
    mpi = {"workers": 2, "processesPerWorker": 2}
    spec = bound([{"storage": "sw"}], mpi=mpi)
    job = mpijob.render_mpijob(run=RUN, spec=spec, stage=spec.stages[0], attempt=0,
                               suspend=False)
    replicas = job["spec"]["mpiReplicaSpecs"]
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]
    launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]
    sshd = list(spec.stages[0].mpi.sshd_command)  # type: ignore[union-attr]
    assert worker["command"] == ["sh", "-c", fusewait.SH_FUSE_WAIT + 'exec "$@"',
                                 "nightshift-wait-for-mounts", *sshd]
    assert launcher["command"][2] == fusewait.SH_FUSE_WAIT + mpijob.DNS_WAIT
    for c in (worker, launcher):
        assert {"name": names.ENV_FUSE_MOUNTS, "value": "/cvmfs/demo.nightshift.io"} in c["env"]
    plain = bound([{"storage": "nfs", "mountPath": "/nfs"}], mpi=mpi)
    job = mpijob.render_mpijob(run=RUN, spec=plain, stage=plain.stages[0], attempt=0,
                               suspend=False)
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["command"] == sshd
    assert all(e["name"] != names.ENV_FUSE_MOUNTS for e in worker["env"])


def test_the_worker_wrapper_execs_sshd_with_its_arguments(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(ROOT + SCRATCH_FUSE)
    mpi = Mpi.model_validate({"workers": 1, "sshdCommand": ["/bin/echo", "sshd", "-De"]})
    argv = mpijob.worker_argv(mpi, fuse=True)
    argv[2] = argv[2].replace("/proc/self/mountinfo", str(info))
    got = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                         env={"PATH": "/usr/bin:/bin", names.ENV_FUSE_MOUNTS: "/scratch"})
    assert (got.returncode, got.stdout) == (0, "sshd -De\n")


# -- the runner's stage-in -------------------------------------------------------------

def test_stage_in_waits_for_its_gluster_storage_then_gives_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "scratch"
    path.mkdir()
    info = tmp_path / "mountinfo"
    disk = f"1221 1210 259:1 /x {path} rw - ext4 /dev/nvme0n1p1 rw\n"
    info.write_text(ROOT + disk)
    monkeypatch.setattr(mounts, "MOUNTINFO", info)
    cfg = RunnerConfig.loads(json.dumps({
        "version": 1, "run": "r", "namespace": "ns", "stage": "s",
        "storages": {"scratch": {"kind": "dir", "path": str(path), "fuse": True}},
        "inputs": [], "outputs": []}))
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s
        if len(slept) == 3:  # the client mounts while stage-in waits
            info.write_text(ROOT + disk + disk.replace(" - ext4 /dev/nvme0n1p1",
                                                        " - fuse.glusterfs 10.0.2.1:v"))

    mounts.wait(cfg, {}, timeout=120, sleep=sleep, clock=lambda: now[0])
    assert slept == [mounts.WAIT_INTERVAL_S] * 3
    info.write_text(ROOT + disk)
    slept.clear()

    def sleep_only(s: float) -> None:
        slept.append(s)
        now[0] += s

    with pytest.raises(mounts.NotMountedError):
        mounts.wait(cfg, {}, timeout=10, sleep=sleep_only, clock=lambda: now[0])
    assert slept == [mounts.WAIT_INTERVAL_S] * 5


# -- one pod volume per claim ------------------------------------------------------------

def test_a_storage_in_outputs_and_mounts_is_one_volume_of_its_claim() -> None:
    """The kubelet never mounts a second volume of the same claim (the real node's pods
    waited for ever); the renderers merge them and point every mount at the first."""
    spec = bound([{"storage": "scratch", "mountPath": "/shared", "readOnly": False}],
                 outputs=[{"storage": "scratch", "path": "out/{item}/"}],
                 forEach={"items": ["a"]})
    job = jobs.render_job(run=RUN, spec=spec, stage=spec.stages[0], attempt=0, completions=1,
                          item_configmaps=["cm"], parallelism=1, suspend=False,
                          runner_image="runner:dev")
    pod = job["spec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v]
    assert claims == ["montage-gluster-client"]
    (volume,) = [v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    by_path = {m["mountPath"]: m for c in [*pod["initContainers"], *pod["containers"]]
               for m in c["volumeMounts"]}
    assert by_path["/shared"]["name"] == volume
    assert by_path[f"{names.MOUNT_STORAGE}/scratch"]["name"] == volume
    names_used = {m["name"] for c in [*pod["initContainers"], *pod["containers"]]
                  for m in c["volumeMounts"]}
    assert names_used <= {v["name"] for v in pod["volumes"]}


def test_merged_claims_are_read_only_only_when_every_volume_was() -> None:
    pod: dict[str, Any] = {
        "volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": "c", "readOnly": True}},
                    {"name": "e", "emptyDir": {}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": "c"}},
                    {"name": "d", "persistentVolumeClaim": {"claimName": "other"}}],
        "containers": [{"name": "x", "volumeMounts": [
            {"name": "b", "mountPath": "/b", "subPath": "s", "readOnly": True},
            {"name": "a", "mountPath": "/a"}, {"name": "d", "mountPath": "/d"}]}]}
    binding.one_volume_per_claim(pod)
    assert pod["volumes"] == [{"name": "a", "persistentVolumeClaim": {"claimName": "c"}},
                              {"name": "e", "emptyDir": {}},
                              {"name": "d", "persistentVolumeClaim": {"claimName": "other"}}]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "a", "mountPath": "/b", "subPath": "s", "readOnly": True},
        {"name": "a", "mountPath": "/a"}, {"name": "d", "mountPath": "/d"}]
    untouched: dict[str, Any] = {"volumes": [{"name": "e", "emptyDir": {}}], "containers": []}
    binding.one_volume_per_claim(untouched)
    assert untouched == {"volumes": [{"name": "e", "emptyDir": {}}], "containers": []}


def test_a_pod_deleted_while_it_waits_ends_at_once(tmp_path: Path) -> None:
    """SIGTERM ends the wait with 143 (trapped: a container's PID 1 ignores it untrapped)."""
    info = tmp_path / "mountinfo"
    info.write_text(ROOT)
    p = subprocess.Popen(["/bin/sh", "-c", wait_script(info)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env={"PATH": "/usr/bin:/bin", names.ENV_FUSE_MOUNTS: "/scratch",
                              names.ENV_FUSE_WAIT_S: "120"})
    time.sleep(1)
    p.terminate()
    out, err = p.communicate(timeout=30)
    assert (p.returncode, out, err) == (143, "", "")
