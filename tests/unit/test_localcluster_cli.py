"""The test bed's command line: `env`'s exports, what `up --profiling` turns on, and
how `up` waits for its CRDs."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nightshift_localcluster import cluster, components, realnode
from nightshift_localcluster.components import Ports
from nightshift_localcluster.nodeconfig import NODE_NAME
from nightshift_localcluster.paths import Layout, LocalClusterError
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


Crd = dict[str, Any]


def _crd_lister(answers: list[list[Crd]]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """A stand-in for cluster.kubectl: each `get crd` call lists the next answer (the
    last one again once they run out)."""
    def kubectl(layout: Layout, *args: str, check: bool = True
                ) -> subprocess.CompletedProcess[str]:
        assert args[:2] == ("get", "crd") and args[-2:] == ("-o", "json")
        items = answers.pop(0) if len(answers) > 1 else answers[0]
        found = [c for c in items if c["metadata"]["name"] in args[2:-2]]
        # As kubectl answers: one name with the object itself, several with a List.
        out = found[0] if len(args[2:-2]) == 1 else {"kind": "List", "items": found}
        return subprocess.CompletedProcess(list(args), 0, json.dumps(out), "")
    return kubectl


def _crd(name: str, established: bool | None) -> Crd:
    crd: Crd = {"metadata": {"name": name}}
    if established is not None:
        crd["status"] = {"conditions": [{"type": "Established",
                                         "status": "True" if established else "False"}]}
    return crd


def test_crds_are_waited_for_through_a_status_without_conditions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No conditions yet: the state `kubectl wait --for=condition=Established` fails on.
    answers = [[_crd("a.x", None), _crd("b.x", None)],
               [_crd("a.x", True), _crd("b.x", False)],
               [_crd("a.x", True), _crd("b.x", None)],  # b.x alone: the object, no List
               [_crd("a.x", True), _crd("b.x", True)]]
    monkeypatch.setattr(cluster, "kubectl", _crd_lister(answers))
    cluster.wait_established(Layout.discover(), "a.x", "b.x", timeout=10)
    assert answers == [[_crd("a.x", True), _crd("b.x", True)]]


def test_a_crd_never_established_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "kubectl", _crd_lister([[_crd("a.x", True), _crd("b.x", None)]]))
    with pytest.raises(LocalClusterError, match=r"not Established after 1 s: b\.x$"):
        cluster.wait_established(Layout.discover(), "a.x", "b.x", timeout=1)


def test_a_taken_mpi_health_port_is_refused_with_the_way_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The MPI Operator's health port is compiled in: a second local cluster's operator
    would crash-loop while `up`'s health wait passed on the first one's answer."""
    from nightshift_localcluster.procs import free_port

    port = free_port()
    monkeypatch.setattr(components, "MPI_OPERATOR_HEALTH_PORT", port)
    cluster.check_mpi_health_port()  # free: nothing to say
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(LocalClusterError) as e:
            cluster.check_mpi_health_port()
    assert f"port {port} is taken" in str(e.value)
    assert "--no-mpi-operator" in str(e.value)


def test_up_without_the_mpi_operator_or_karpenter_is_one_switch_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nightshift_localcluster import cli

    seen: dict[str, object] = {}

    def fake_up(*args: object, **kwargs: object) -> None:
        seen.update(kwargs)

    monkeypatch.setattr(cluster, "up", fake_up)
    cli.main(["up", "--no-mpi-operator", "--no-real-node"])
    assert seen["mpi_operator"] is False
    assert seen["karpenter"] is True
    cli.main(["up", "--no-real-node"])
    assert seen["mpi_operator"] is True
    cli.main(["up", "--no-karpenter", "--no-real-node"])
    assert seen["karpenter"] is False
    assert seen["mpi_operator"] is True
