"""The test bed's host-change journal: mount propagation as /proc/self/mountinfo says."""

from __future__ import annotations

from pathlib import Path

from nightshift.sharedstorage.objects import HOST_ROOT
from nightshift_localcluster.hostchanges import mount_propagation
from nightshift_localcluster.nodeconfig import NODE_HOST_ROOT

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 0:25 / /var/lib/nightshift rw,relatime shared:7 - ext4 /dev/vda1 rw
31 30 0:26 / /var/lib/nightshift/gluster/ns/g rw shared:8 master:3 - fuse.glusterfs x rw
32 22 0:27 / /mnt/slave rw master:4 - ext4 /dev/vdb rw
33 22 0:28 / /mnt/twice rw shared:9 - ext4 /dev/vdc rw
34 33 0:28 / /mnt/twice rw - ext4 /dev/vdc rw
"""


def test_propagation_of_each_kind_of_mount_point() -> None:
    assert mount_propagation(Path("/"), MOUNTINFO) == "private"
    assert mount_propagation(Path("/var/lib/nightshift"), MOUNTINFO) == "shared"
    assert mount_propagation(Path("/var/lib/nightshift/gluster/ns/g"), MOUNTINFO) == "shared"
    assert mount_propagation(Path("/mnt/slave"), MOUNTINFO) == "slave"
    # The last mount on a point is the one the kernel resolves.
    assert mount_propagation(Path("/mnt/twice"), MOUNTINFO) == "private"
    assert mount_propagation(Path("/not/a/mount"), MOUNTINFO) is None


def test_this_hosts_mountinfo_parses() -> None:
    assert mount_propagation(Path("/")) in {"shared", "slave", "private"}


def test_the_shared_directory_is_the_operators_node_directory() -> None:
    assert NODE_HOST_ROOT == HOST_ROOT
