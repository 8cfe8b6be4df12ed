"""The real node's containerd root: the build cache's, so a fresh clone's node starts
with the images an earlier checkout imported, unless another checkout's node holds it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightshift_localcluster import nodeconfig, realnode
from nightshift_localcluster.paths import Layout


def layout(tmp_path: Path, name: str) -> Layout:
    return Layout(root=tmp_path, state=tmp_path / name / ".localcluster",
                  cache=tmp_path / "cache", versions={})


@pytest.fixture
def fake_containerd() -> Iterator[int]:
    """A live process whose argv[0] ends in `containerd`, as the holder's would."""
    p = subprocess.Popen(["bash", "-c", "exec -a /usr/bin/containerd sleep 60"])
    cmdline = Path(f"/proc/{p.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes().startswith(b"/usr/bin/containerd\0"):  # bash's exec
        assert time.monotonic() < deadline, cmdline.read_bytes()
        time.sleep(0.01)
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def shared(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "realnode" / "containerd" / "root"


def hold(tmp_path: Path, pid: int, holder: Layout) -> None:
    owner = shared(tmp_path).parent / realnode.SHARED_OWNER
    owner.parent.mkdir(parents=True, exist_ok=True)
    owner.write_text(f"{pid}\n{holder.state}\n")


def test_a_first_node_takes_the_cache_root(tmp_path: Path) -> None:
    assert realnode.shared_root(layout(tmp_path, "a")) == shared(tmp_path)


def test_a_live_containerd_of_another_checkout_keeps_it(
        tmp_path: Path, fake_containerd: int) -> None:
    said: list[str] = []
    hold(tmp_path, fake_containerd, layout(tmp_path, "a"))
    assert realnode.shared_root(layout(tmp_path, "b"), said.append) is None
    assert str(fake_containerd) in said[0] and "its own root" in said[0]
    # The holder itself, started again, takes it back.
    assert realnode.shared_root(layout(tmp_path, "a")) == shared(tmp_path)


def test_a_gone_holder_or_another_program_frees_it(tmp_path: Path) -> None:
    p = subprocess.Popen(["sleep", "60"])  # alive, but not a containerd
    try:
        hold(tmp_path, p.pid, layout(tmp_path, "a"))
        assert realnode.shared_root(layout(tmp_path, "b")) == shared(tmp_path)
    finally:
        p.kill()
        p.wait()
    hold(tmp_path, p.pid, layout(tmp_path, "a"))  # exited
    assert realnode.shared_root(layout(tmp_path, "b")) == shared(tmp_path)


def test_the_config_and_the_stamps_follow_the_root(tmp_path: Path) -> None:
    def node(root: Path | None) -> nodeconfig.NodePlan:
        return nodeconfig.NodePlan(dir=tmp_path / "realnode", subnet="10.244.0.0/24",
                                   kubelet_port=1, kubelet_healthz_port=2,
                                   proxy_healthz_port=3, proxy_metrics_port=4,
                                   shared_root=root)

    config = tmp_path / "config.toml"
    assert nodeconfig.imported_dir(config) is None  # no node started yet
    for root, root_dir in ((shared(tmp_path), shared(tmp_path)),
                           (None, tmp_path / "realnode" / "containerd" / "root")):
        config.write_text(nodeconfig.containerd_toml(node(root)))
        assert f'root = "{root_dir}"' in config.read_text()
        assert nodeconfig.imported_dir(config) == root_dir.parent / "nightshift-imported"


def test_the_node_makes_the_config_dir_its_root_no_longer_makes(tmp_path: Path) -> None:
    """With the root in the cache, nothing else made `realnode/containerd/`, where the
    config and the socket go: a fresh clone's `up` failed on writing the config."""
    node = nodeconfig.NodePlan(dir=tmp_path / "realnode", subnet="10.244.0.0/24",
                               kubelet_port=1, kubelet_healthz_port=2, proxy_healthz_port=3,
                               proxy_metrics_port=4, shared_root=shared(tmp_path))
    for d in node.dirs:
        d.mkdir(parents=True, exist_ok=True)
    for path in (node.containerd_config, node.containerd_sock, node.cni_conf_dir,
                 node.kubelet_root, node.containerd_state, node.containerd_root):
        assert path.parent.is_dir(), path
