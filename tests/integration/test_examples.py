"""The seed examples (examples/<seed>/) applied as KWOK simulations through the operator:
each run keeps its stages, item sources and counts, batch, dependsOn, retries and MPI
layout (examples/simulate_examples.py), runs on static KWOK pools named after the
example's pools, and must Succeed with exactly the items per stage counted by hand in
the example's sim.yaml. Item sources that read S3 (fromS3, fromFile) read versitygw,
seeded first with what sim.yaml lists. Each example gets its own namespace.

The seeds are split over two files (this one and test_examples_more.py) so that
pytest-xdist's per-file distribution can run them on two workers.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nightshift.api import names
from nightshift.kube import Kube
from tests.clusterutil import Kubectl
from tests.examplesutil import EXAMPLES, simulate_examples
from tests.integration.conftest import OperatorProcess
from tests.integration.prutil import jobs, kwok_node_pool, stage_status, wait_phase
from tests.s3server import VersityGW, s3server

__all__ = ["s3server"]  # the fixture, used by name below

sx = simulate_examples()
SECRET = "sim-s3"


@pytest.fixture
def kwok_pools(kubectl: Kubectl, namespace: str) -> Iterator[dict[str, str]]:
    """A static KWOK node pool per pool name, private to the test (nodes are
    cluster-scoped; pods select only nightshift.io/pool)."""
    made: dict[str, str] = {}
    yield made  # filled by _make_pools, read back for the clean-up
    for name in made.values():
        kubectl("delete", "node", f"kwok-{name}", "--wait=false", check=False)


def _make_pools(kubectl: Kubectl, namespace: str, pools: list[str],
                made: dict[str, str]) -> dict[str, str]:
    for pool in pools:
        name = f"{namespace}-{pool}"
        kubectl.apply(kwok_node_pool(name))
        made[pool] = name
    return made


def _seed_s3(ex: Any, run: dict[str, Any], gw: VersityGW, kubectl: Kubectl,
             namespace: str) -> int:
    needed = sx.item_storages(run)
    if not needed:
        return 0
    s3 = gw.client()
    for storage in sorted(needed):
        s3.create_bucket(Bucket=sx.S3Target.bucket(storage))
    objects = sx.seed_objects(ex, run)
    for storage, key, body in objects:
        s3.put_object(Bucket=sx.S3Target.bucket(storage), Key=key, Body=body)
    def b64(v: str) -> str:
        return base64.b64encode(v.encode()).decode()

    kubectl.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET},
                   "data": {"AWS_ACCESS_KEY_ID": b64(gw.access_key),
                            "AWS_SECRET_ACCESS_KEY": b64(gw.secret_key)}}, namespace)
    return len(objects)


def _need_mpi_operator(ex: Any, kubectl: Kubectl) -> None:
    mpi = any("mpi" in s for r in ex.runs for s in r["spec"]["stages"])
    if mpi and kubectl("get", "crd", "mpijobs.kubeflow.org", check=False).returncode != 0:
        pytest.skip("no MPIJob CRD: the MPI Operator is not installed in this cluster")


# The longest simulations here, the others in test_examples_more.py (about even).
SEEDS_HERE = ("chiles", "broadband", "npb", "snfactory")


@pytest.mark.parametrize("name", SEEDS_HERE)
def test_example_simulation_succeeds_with_its_item_counts(
        name: str, kube: Kube, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
        kwok_pools: dict[str, str], s3server: VersityGW) -> None:
    check_example(name, kube, kubectl, namespace, kwok_pools, s3server)


def check_example(name: str, kube: Kube, kubectl: Kubectl, namespace: str,
                  kwok_pools: dict[str, str], s3server: VersityGW) -> None:
    """Simulate the example's runs; each must Succeed with its hand-counted items."""
    ex = sx.load(EXAMPLES / name)
    _need_mpi_operator(ex, kubectl)
    pool_map = _make_pools(kubectl, namespace, sx.pools(ex), kwok_pools)
    target = sx.S3Target(s3server.endpoint, SECRET)
    for run in ex.runs:
        run_name = run["metadata"]["name"]
        _seed_s3(ex, run, s3server, kubectl, namespace)
        sim = sx.simulate_run(ex, run, pool_map, target)
        started = time.monotonic()
        kubectl.apply(sim, namespace)
        done = wait_phase(kube, namespace, run_name, {"Succeeded", "Failed"}, 600)
        elapsed = time.monotonic() - started
        assert done["status"]["phase"] == "Succeeded", done["status"]
        expect = ex.sim["expect"][run_name]
        got = {s: (stage_status(done, s)["total"], stage_status(done, s)["succeeded"])
               for s in expect}
        assert got == {s: (n, n) for s, n in expect.items()}, got
        assert done["status"]["total"] == sum(expect.values())
        for st in run["spec"]["stages"]:
            if int(st.get("batch", 1)) > 1:
                [job] = [j for j in jobs(kube, namespace, run_name)
                         if j["metadata"]["labels"][names.LABEL_STAGE] == st["name"]]
                # K items a pod: ceil(N/K) completions.
                assert job["spec"]["completions"] == -(-expect[st["name"]] // st["batch"])
        mpi = [s for s in run["spec"]["stages"] if "mpi" in s]
        if mpi:
            mpijobs = kube.list("kubeflow.org/v2beta1", "MPIJob", namespace)
            workers = sorted(j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] for j in mpijobs)
            assert workers == sorted(s["mpi"]["workers"] for s in mpi), workers
        print(f"example {name}: run {run_name} Succeeded in {elapsed:.0f} s, items per "
              f"stage {dict(expect)}")
