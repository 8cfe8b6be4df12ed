"""run.sh's wait for the node FUSE mounts a stage's steps use. Pure (shell text).

A glusterfs or cvmfs SharedStorage reaches the steps (`stages[].mounts`) as a claim on a
node directory that its client DaemonSet FUSE-mounts. The client makes the directory
before it mounts, so on a node whose client has not mounted yet (a new node, where the
pod can start first), or cannot (a volume that is not there, a squid that does not
answer), the step would see an empty directory: software missing from /cvmfs, or, for a
writable Gluster mount, outputs left on the node's own disk as if all were well.

So run.sh reads /proc/self/mountinfo for each path of names.ENV_FUSE_MOUNTS
(binding.fuse_mounts, in the stage's env file) and waits until it is a FUSE mount: the
mounts' HostToContainer propagation brings a mount made later into the running
container. After names.ENV_FUSE_WAIT_S seconds (default names.FUSE_WAIT_S), or at once in an
image without `sleep` (user images promise /bin/sh, nothing more), the item fails with
exit 75 (EX_TEMPFAIL), so its retries apply, and its last line (the run's failure
sample) names the path and where to look. tests/unit/test_fuse_wait.py runs it in dash.
"""

from __future__ import annotations

from nightshift.api import names

EX_TEMPFAIL = names.EX_TEMPFAIL

# POSIX sh, builtins only but `sleep` (checked). The last mountinfo entry at a path is
# the one a process there sees (a later mount on the same point hides the earlier). The
# shell is the container's PID 1, which ignores SIGTERM unless it traps it: a pod deleted
# while it waits (a cancelled run, a spot interruption) ends within a `sleep`, not after
# its grace period.
SH_FUSE_WAIT = f"""\
fuse_at() {{
fs=
while read -r _ _ _ _ point rest; do
if [ "$point" = "$1" ]; then fs=${{rest#* - }}; fs=${{fs%% *}}; fi
done < /proc/self/mountinfo
case $fs in fuse|fuse.*) return 0 ;; esac
return 1
}}
trap 'exit 143' TERM INT
fuse_left=${{{names.ENV_FUSE_MOUNTS}-}}
fuse_wait=${{{names.ENV_FUSE_WAIT_S}:-{names.FUSE_WAIT_S}}}
while [ -n "$fuse_left" ]; do
fuse_path=${{fuse_left%%:*}}
case $fuse_left in *:*) fuse_left=${{fuse_left#*:}} ;; *) fuse_left= ;; esac
fuse_waited=0
until fuse_at "$fuse_path"; do
if [ "$fuse_waited" -ge "$fuse_wait" ] || ! command -v sleep >/dev/null 2>&1; then
echo "nightshift: $fuse_path is not mounted in this pod after ${{fuse_waited}} s (it is \
on ${{fs:-the node's own disk}}): the node's glusterfs or cvmfs SharedStorage client has \
not mounted it, and the step would see an empty directory; the item is retried (exit \
{EX_TEMPFAIL}). See the SharedStorage's status.clients and its client pod on this node" >&2
exit {EX_TEMPFAIL}
fi
sleep 2
fuse_waited=$((fuse_waited + 2))
done
done
trap - TERM INT
"""
