"""Host changes made for the real node, journaled so `down` undoes exactly those.

The journal (a JSON file) is written before each change, so a killed `up` still leaves
enough to revert: the bridge we created, sysctls as they were, iptables and ip6tables
as they were (rules and chains added since are removed; nothing that was there before is
touched), network namespaces and cgroups that appeared, mounts under our directory, and
the shared bind mount made for node-level file systems (and whatever was mounted in it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

Say = Callable[[str], None]

# Knobs the kubelet, kube-proxy and the CNI bridge may set; their values before `up`
# are restored on `down`.
SYSCTLS = [
    "net/ipv4/ip_forward",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/ipv4/conf/all/route_localnet",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
]
NETNS_DIR = Path("/var/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAMES = ("kubepods", "kubepods.slice")


def run(*argv: str, check: bool = False,
        input_: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, input=input_)


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        tmp.rename(self.path)

    # -- snapshot before anything changes -------------------------------------------
    def snapshot(self) -> None:
        if self.data.get("snapshot"):
            return  # an earlier, unreverted `up`: keep the older (truer) snapshot
        self.data["sysctls"] = {k: _read_sysctl(k) for k in SYSCTLS}
        self.data["iptables"] = {cmd: _save_tables(cmd) for cmd in ("iptables", "ip6tables")}
        self.data["netns"] = sorted(p.name for p in NETNS_DIR.glob("*")) \
            if NETNS_DIR.is_dir() else []
        self.data["netns_dir_existed"] = NETNS_DIR.is_dir()
        self.data["cgroups"] = sorted(str(p) for p in _our_cgroups())
        self.data["snapshot"] = True
        self.save()

    def set_sysctl(self, key: str, value: str) -> None:
        Path("/proc/sys", key).write_text(value)

    def add_bridge(self, name: str, address: str) -> None:
        """Create the bridge with the pods' gateway address, unless it already exists."""
        if Path("/sys/class/net", name).exists():
            return
        self.data["bridge"] = name
        self.save()
        for argv in (("ip", "link", "add", name, "type", "bridge"),
                     ("ip", "addr", "add", address, "dev", name),
                     ("ip", "link", "set", name, "up")):
            r = run(*argv)
            if r.returncode != 0:
                raise OSError(f"{' '.join(argv)}: {r.stderr.strip()}")

    def shared_mount(self, path: Path) -> None:
        """Make `path` a shared mount (a bind mount of itself, rshared), unless it is one.

        Pods whose volumes use Bidirectional propagation (our Gluster and CVMFS client
        DaemonSets mount FUSE file systems under it for the other pods) need their host
        path on a shared mount; EKS nodes (systemd) mount / shared, this host may not.
        """
        if mount_propagation(path) == "shared":
            return
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        self.data.setdefault("shared_mounts", []).append(
            {"path": str(path), "created": created})
        self.save()
        for argv in (("mount", "--bind", str(path), str(path)),
                     ("mount", "--make-rshared", str(path))):
            r = run(*argv)
            if r.returncode != 0:
                raise OSError(f"{' '.join(argv)}: {r.stderr.strip()}")

    # -- revert ---------------------------------------------------------------------
    def revert(self, our_dir: Path, say: Say) -> list[str]:
        """Undo everything journaled; returns what could not be undone."""
        if not self.data:
            return []
        left: list[str] = []
        left += _unmount_under(our_dir)
        for entry in reversed(self.data.get("shared_mounts") or []):
            shared = Path(entry["path"])
            left += _unmount_under(shared)
            # Our bind mount is the top one: one umount, never a mount that was there.
            r = run("umount", "-l", str(shared))
            if r.returncode != 0 and mount_propagation(shared) is not None:
                left.append(f"mount {shared}: {r.stderr.strip()}")
            if entry.get("created"):
                with contextlib.suppress(OSError):
                    shared.rmdir()  # only if empty: never delete data left in it
        left += self._remove_netns()
        left += self._remove_cgroups()
        if self.data.get("bridge"):
            r = run("ip", "link", "del", self.data["bridge"])
            if r.returncode != 0 and Path("/sys/class/net", self.data["bridge"]).exists():
                left.append(f"bridge {self.data['bridge']}: {r.stderr.strip()}")
        for cmd, before in (self.data.get("iptables") or {}).items():
            if before is not None:
                left += _restore_tables(cmd, before)
        for key, value in (self.data.get("sysctls") or {}).items():
            if value is not None and _read_sysctl(key) != value:
                try:
                    Path("/proc/sys", key).write_text(value)
                except OSError as e:
                    left.append(f"sysctl {key}: {e}")
        if left:
            say("could not revert: " + "; ".join(left))
            self.save()
        else:
            self.path.unlink(missing_ok=True)
            self.data = {}
        return left

    def _remove_netns(self) -> list[str]:
        if not NETNS_DIR.is_dir():
            return []
        before = set(self.data.get("netns") or [])
        left = []
        for p in NETNS_DIR.glob("*"):
            if p.name in before or not p.name.startswith("cni-"):
                continue
            run("umount", str(p))
            try:
                p.unlink()
            except OSError as e:
                left.append(f"netns {p}: {e}")
        if not self.data.get("netns_dir_existed", True):
            with contextlib.suppress(OSError):
                NETNS_DIR.rmdir()
        return left

    def _remove_cgroups(self) -> list[str]:
        before = set(self.data.get("cgroups") or [])
        left = []
        for top in _our_cgroups():
            if str(top) in before:
                continue
            # Depth first: a cgroup directory is removable once it has no children.
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda t: -len(t[0])):
                try:
                    os.rmdir(dirpath)
                except OSError as e:
                    left.append(f"cgroup {dirpath}: {e.strerror}")
                    break
        return left


def _read_sysctl(key: str) -> str | None:
    try:
        return Path("/proc/sys", key).read_text().strip()
    except OSError:
        return None


def _our_cgroups() -> list[Path]:
    found = []
    for hierarchy in CGROUP_ROOT.iterdir() if CGROUP_ROOT.is_dir() else []:
        cands = [hierarchy / n for n in CGROUP_NAMES]
        found += [c for c in cands if c.is_dir()]
    if not found:  # cgroup v2: the hierarchy is the root itself
        found = [CGROUP_ROOT / n for n in CGROUP_NAMES if (CGROUP_ROOT / n).is_dir()]
    return found


def mount_propagation(path: Path, mountinfo: str | None = None) -> str | None:
    """'shared', 'slave' or 'private' for a mount point (the last mount on it wins, as
    in the kernel), None when `path` is not a mount point."""
    text = mountinfo if mountinfo is not None else \
        Path("/proc/self/mountinfo").read_text()
    found = None
    for line in text.splitlines():
        fields = line.split()
        # id parent major:minor root mount-point options [optional fields...] - fstype ...
        if len(fields) < 7 or fields[4] != str(path):
            continue
        optional = fields[6:fields.index("-")] if "-" in fields else []
        found = ("shared" if any(f.startswith("shared:") for f in optional) else
                 "slave" if any(f.startswith("master:") for f in optional) else "private")
    return found


def _unmount_under(d: Path) -> list[str]:
    prefix = str(d.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    ours = sorted({m for m in mounts if m.startswith(prefix)}, key=len, reverse=True)
    left = []
    for m in ours:
        r = run("umount", m)
        if r.returncode != 0:
            r = run("umount", "-l", m)
            if r.returncode != 0:
                left.append(f"mount {m}: {r.stderr.strip()}")
    return left


def _save_tables(cmd: str) -> dict[str, list[str]] | None:
    """Per table, the chain declarations and rules as `<cmd>-save` prints them."""
    r = run(f"{cmd}-save")
    if r.returncode != 0:
        return None
    tables: dict[str, list[str]] = {}
    current = ""
    for line in r.stdout.splitlines():
        if line.startswith("*"):
            current = line[1:]
            tables[current] = []
        elif current and (line.startswith(":") or line.startswith("-A ")):
            tables[current].append(line.split(" [", 1)[0] if line.startswith(":") else line)
    return tables


def _restore_tables(cmd: str, before: dict[str, list[str]]) -> list[str]:
    """Remove rules and chains that were not there before; leave the rest alone."""
    now = _save_tables(cmd)
    if now is None:
        return []
    left = []
    for table, lines in now.items():
        old = set(before.get(table, []))
        old_chains = {ln[1:].split()[0] for ln in old if ln.startswith(":")}
        new_chains = [ln[1:].split()[0] for ln in lines
                      if ln.startswith(":") and ln[1:].split()[0] not in old_chains]
        # Rules in chains that existed before (new chains are flushed whole below).
        for ln in lines:
            if not ln.startswith("-A ") or ln in old:
                continue
            chain = ln.split()[1]
            if chain in new_chains:
                continue
            r = run(cmd, "-t", table, "-D", *_split_rule(ln[3:]))
            if r.returncode != 0:
                left.append(f"{cmd} -t {table} {ln}: {r.stderr.strip()}")
        for chain in new_chains:
            run(cmd, "-t", table, "-F", chain)
        for chain in new_chains:
            r = run(cmd, "-t", table, "-X", chain)
            if r.returncode != 0:
                left.append(f"{cmd} -t {table} -X {chain}: {r.stderr.strip()}")
    return left


def _split_rule(spec: str) -> list[str]:
    return shlex.split(spec)
