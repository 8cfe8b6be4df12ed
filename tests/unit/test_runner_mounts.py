"""The runner refuses a glusterfs storage whose node mount is not there
(runner/mounts.py): the directory exists either way, and without the FUSE mount the
item's outputs would land on the node's own disk, committed as if all were well."""

from __future__ import annotations

import json

import pytest

from nightshift.api.runnerwire import RunnerConfig
from nightshift.runner import mounts

# /proc/self/mountinfo of a stage-in container, with and without the volume mounted.
BASE = "".join(line + "\n" for line in [
    "1210 1101 0:341 / / rw,relatime master:512 - overlay overlay rw,lowerdir=/l,upperdir=/u",
    "1211 1210 0:343 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw",
    "1220 1210 259:1 /var/lib/kubelet/pods/x/volumes/kubernetes.io~empty-dir/work "
    "/nightshift/work rw,relatime - ext4 /dev/nvme0n1p1 rw",
    "1221 1210 259:1 /var/lib/nightshift/gluster/ns-montage/mnt /nightshift/storage/scratch "
    "rw,relatime master:9 - ext4 /dev/nvme0n1p1 rw"])
FUSE = ("1240 1221 0:77 / /nightshift/storage/scratch rw,relatime master:40 - "
        "fuse.glusterfs 10.0.2.1:ns-montage rw,user_id=0,group_id=0\n")
CFG = {"version": 1, "run": "r", "namespace": "ns", "stage": "s",
       "storages": {"scratch": {"kind": "dir", "path": "/nightshift/storage/scratch",
                                "fuse": True},
                    "nfs": {"kind": "dir", "path": "/nightshift/storage/nfs"}},
       "inputs": [], "outputs": [{"storage": "scratch", "path": "out/{item}/"}]}


def test_the_last_longest_mount_point_above_a_path_gives_its_type() -> None:
    assert mounts.fs_type("/nightshift/storage/scratch", BASE) == "ext4"
    assert mounts.fs_type("/nightshift/storage/scratch", BASE + FUSE) == "fuse.glusterfs"
    assert mounts.fs_type("/nightshift/storage/scratch/out", BASE + FUSE) == "fuse.glusterfs"
    assert mounts.fs_type("/nightshift/storage/scratchy", BASE + FUSE) == "overlay"
    assert mounts.fs_type("/etc/hosts", BASE) == "overlay"
    spaced = "7 1 0:5 / /mnt/my\\040disk rw - fuse.sshfs host: rw\n"
    assert mounts.fs_type("/mnt/my disk/x", BASE + spaced) == "fuse.sshfs"


def test_stage_in_refuses_a_fuse_storage_that_is_not_mounted() -> None:
    cfg = RunnerConfig.loads(json.dumps(CFG))
    assert cfg.storages["scratch"].fuse and not cfg.storages["nfs"].fuse
    assert RunnerConfig.loads(cfg.dumps()) == cfg
    assert "fuse" not in cfg.to_json()["storages"]["nfs"]
    mounts.check(cfg, {"NODE_NAME": "ip-10-0-3-7"}, BASE + FUSE)
    with pytest.raises(mounts.NotMountedError) as e:
        mounts.check(cfg, {"NODE_NAME": "ip-10-0-3-7"}, BASE)
    assert str(e.value) == (
        "storage 'scratch': /nightshift/storage/scratch is not the volume's FUSE mount on "
        "node ip-10-0-3-7 (it is on ext4): the SharedStorage's client there has not mounted "
        "it, and the item would read an empty directory or leave its files on the node's "
        "own disk; the item is retried (see the SharedStorage's status.clients)")


def test_a_cvmfs_storage_is_checked_repository_by_repository() -> None:
    """A cvmfs storage's root is the node's plain directory; each repository under it is
    its own FUSE mount, and each must be there."""
    cfg = RunnerConfig.loads(json.dumps({**CFG, "storages": {"sw": {
        "kind": "dir", "path": "/nightshift/storage/sw",
        "fuseDirs": ["a.example.org", "b.example.org"]}}, "outputs": []}))
    assert cfg.storages["sw"].fuse_dirs == ("a.example.org", "b.example.org")
    assert RunnerConfig.loads(cfg.dumps()) == cfg
    root = ("1221 1210 259:1 /var/lib/nightshift/cvmfs/ns-sw /nightshift/storage/sw ro "
            "master:9 - ext4 /dev/nvme0n1p1 rw\n")
    repo = ("12{n} 1221 0:8{n} / /nightshift/storage/sw/{r} ro master:4{n} - fuse cvmfs2 "
            "ro\n")
    both = BASE + root + repo.format(n=1, r="a.example.org") + repo.format(
        n=2, r="b.example.org")
    mounts.check(cfg, {}, both)
    with pytest.raises(mounts.NotMountedError) as e:
        mounts.check(cfg, {}, BASE + root + repo.format(n=1, r="a.example.org"))
    assert str(e.value).startswith("storage 'sw': /nightshift/storage/sw/b.example.org is "
                                   "not the volume's FUSE mount on node this node (it is on "
                                   "ext4)")
