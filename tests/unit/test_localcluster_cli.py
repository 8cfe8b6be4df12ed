"""The test bed's command line: `env`'s exports, and what `up --profiling` turns on."""

from __future__ import annotations

from pathlib import Path

from nightshift_localcluster import cluster, components, realnode
from nightshift_localcluster.components import Ports
from nightshift_localcluster.nodeconfig import NODE_NAME
from nightshift_localcluster.paths import Layout
from nightshift_localcluster.pki import Pki


def exports() -> dict[str, str]:
    lines = cluster.env_lines(Layout.discover())
    assert all(line.startswith("export ") for line in lines)
    return dict(line.removeprefix("export ").split("=", 1) for line in lines)


def test_env_names_the_real_node_for_scripts_that_wait_on_it() -> None:
    assert exports()["NIGHTSHIFT_REAL_NODE_NAME"] == NODE_NAME


def test_env_never_sets_what_up_reads_as_its_real_node_switch() -> None:
    # `up` reads NIGHTSHIFT_REAL_NODE=1/0; a shell that evaluated `env` and then ran `up`
    # must not have changed that choice.
    assert realnode.ENV not in exports()


def test_the_api_server_serves_pprof_only_when_asked(tmp_path: Path) -> None:
    layout, pki, ports = Layout.discover(), Pki(tmp_path), Ports(*range(2001, 2009))
    assert "--profiling=false" in components.apiserver(layout, pki, ports)
    on = components.apiserver(layout, pki, ports, profiling=True)
    assert "--profiling=true" in on and "--profiling=false" not in on
