from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from nightshift.api.problems import Problem
from nightshift.sharedstorage import squid
from nightshift.sharedstorage.objects import Storage
from nightshift.sharedstorage.render import endpoints
from nightshift.sharedstorage.status import (
    Clients,
    Observed,
    SquidCounters,
    SquidSample,
    daemonset_counts,
    parse_squid_counters,
    storage_status,
)
from nightshift.sharedstorage.validate import effective_squid_cidrs
from tests.bad_sharedstorages import FACTS, GOOD
from tests.crdutil import openapi_schema

# The shape of squid's cache manager page mgr:counters (stat.cc, statCountersDump).
COUNTERS = """\
sample_time = 1763900300.000000 (Sun, 23 Nov 2025 12:18:20 GMT)
client_http.requests = 1500
client_http.hits = 1200
client_http.errors = 0
client_http.kbytes_in = 12
"""
NOW = "2026-01-01T00:00:00Z"


def test_parse_squid_counters() -> None:
    assert parse_squid_counters(COUNTERS, 5.0) == SquidCounters(5.0, 1500, 1200)
    with pytest.raises(ValueError, match="mgr:counters"):
        parse_squid_counters("<html>Access Denied</html>", 5.0)


def test_daemonset_counts() -> None:
    assert daemonset_counts({"status": {"desiredNumberScheduled": 40, "numberReady": 38}}) == (
        Clients(40, 38))
    assert daemonset_counts(None) == Clients(0, 0)
    assert daemonset_counts({"status": {}}) == Clients(0, 0)


def _ds(generation: int, observed: int, updated: int) -> dict[str, object]:
    return {"metadata": {"name": "sw-cvmfs-client", "namespace": "hep",
                         "generation": generation},
            "spec": {"selector": {"matchLabels": {"nightshift.io/storage": "sw",
                                                  "app.kubernetes.io/component": "cvmfs"}}},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": 5,
                       "currentNumberScheduled": 5, "numberReady": 5,
                       **({"updatedNumberScheduled": updated} if updated else {})}}


def test_clients_on_an_older_template_are_counted_with_how_to_move_them() -> None:
    got = daemonset_counts(_ds(2, 2, 3))
    assert (got.nodes, got.mounted, got.outdated) == (5, 5, 2)
    assert got.how == (
        "2 of 5 nodes mount the previous configuration: a client is not restarted under "
        "running pods (updateStrategy OnDelete), so a change reaches a node when its client "
        "pod is deleted, e.g. once the node is idle: kubectl delete pod -n hep -l "
        "app.kubernetes.io/component=cvmfs,nightshift.io/storage=sw --field-selector "
        "spec.nodeName=<node>")
    # Where a client that does not mount says why.
    logs = ("kubectl logs -n hep -l app.kubernetes.io/component=cvmfs,nightshift.io/storage=sw"
            " --tail=20")
    assert got.logs == logs
    # The controller has not looked at the new template yet: nothing said.
    assert daemonset_counts(_ds(3, 2, 5)) == Clients(5, 5, logs=logs)
    assert daemonset_counts(_ds(2, 2, 5)) == Clients(5, 5, logs=logs)
    # None updated: the API server leaves the 0 out.
    assert daemonset_counts(_ds(2, 2, 0)).outdated == 5
    # Made, its pods not yet: nothing is outdated.
    fresh = _ds(1, 1, 0)
    fresh["status"] = {"observedGeneration": 1, "desiredNumberScheduled": 5}
    assert daemonset_counts(fresh) == Clients(5, 0, logs=logs)
    status = storage_status(GOOD["cvmfs-local"], observed=Observed(
        servers_wanted=1, servers_ready=1, clients=got), now=NOW)
    assert status["phase"] == "Ready"  # the mounts work, with the old configuration
    assert status["clients"] == {"nodes": 5, "mounted": 5, "outdated": 2, "update": got.how}


def test_ready_cvmfs_with_squid_figures() -> None:
    obj = GOOD["cvmfs-eks"]
    status = storage_status(obj, now=NOW, observed=Observed(
        servers_wanted=2, servers_ready=2, clients=Clients(40, 40),
        endpoints=endpoints(obj, load_balancer="nlb.example"),
        squid=[SquidSample(1500.0, 1200.0), SquidSample(500.0, 300.0)]))
    assert status["phase"] == "Ready"
    assert status["endpoint"] == "http://software-squid.physics.svc.cluster.local:3128"
    assert status["clients"] == {"nodes": 40, "mounted": 40}
    assert status["squid"] == {"replicas": 2, "hitRatio": 0.75, "requestsPerMinute": 120000.0}
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["observedGeneration"] == 2


def test_pending_says_what_is_missing() -> None:
    status = storage_status(GOOD["gluster-nufa"], now=NOW, observed=Observed(
        servers_wanted=4, servers_ready=3, clients=Clients(10, 7),
        not_ready=["volume montage not started: waiting for every server"]))
    assert status["phase"] == "Pending"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["message"] == ("volume montage not started: waiting for every server; "
                                "3 of 4 servers ready; mounted on 7 of 10 nodes")


def test_invalid_and_deleting() -> None:
    status = storage_status(GOOD["nfs-dedicated"], now=NOW, observed=Observed(),
                            problems=[Problem("spec.nfs.pool", "no such pool")])
    assert status["phase"] == "Failed"
    invalid = next(c for c in status["conditions"] if c["type"] == "Invalid")
    assert invalid["message"] == "spec.nfs.pool: no such pool"
    assert storage_status(GOOD["s3"], now=NOW, observed=Observed(), deleting=True)[
        "phase"] == "Deleting"


def test_unchanged_status_keeps_transition_times() -> None:
    obj = GOOD["s3"]
    first = storage_status(obj, now=NOW, observed=Observed(endpoints=endpoints(obj)))
    again = storage_status({**obj, "status": first}, now="2030-01-01T00:00:00Z",
                           observed=Observed(endpoints=endpoints(obj)))
    assert again == first


def test_status_fields_are_in_the_crd() -> None:
    props = openapi_schema("sharedstorage.yaml")["properties"]["status"]["properties"]
    obj = GOOD["cvmfs-eks"]
    status = storage_status(obj, now=NOW, observed=Observed(
        servers_wanted=1, servers_ready=1, clients=Clients(1, 1), capacity="50Gi",
        endpoints=endpoints(obj), squid=[SquidSample(1, 1)]))
    assert set(status) <= set(props)
    assert set(status["squid"]) <= set(props["squid"]["properties"])
    assert set(status["clients"]) <= set(props["clients"]["properties"])
    # Counts, never node lists: small at any cluster size.
    assert len(yaml.safe_dump(status)) < 1500


def _squid() -> str | None:
    return os.environ.get("NIGHTSHIFT_SQUID") or shutil.which("squid")


@pytest.mark.skipif(_squid() is None, reason="no squid binary (apt-get install squid, or "
                    "NIGHTSHIFT_SQUID=/path/to/squid)")
@pytest.mark.parametrize("case", ["cvmfs-eks", "cvmfs-local"])
def test_real_squid_parses_the_rendered_config(case: str, tmp_path: Path) -> None:
    st = Storage.of(GOOD[case])
    conf = tmp_path / "squid.conf"
    conf.write_text(squid.squid_conf(st, effective_squid_cidrs(st.spec, FACTS)))
    out = subprocess.run([str(_squid()), "-k", "parse", "-f", str(conf)],
                         capture_output=True, text=True, timeout=60, check=False)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "Bungled" not in log and "ERROR:" not in log, log


def test_applied_generation_is_the_last_valid_one() -> None:
    obj = copy.deepcopy(GOOD["nfs-dedicated"])
    st = storage_status(obj, now=NOW, observed=Observed())
    assert st["appliedGeneration"] == 2
    obj["status"], obj["metadata"]["generation"] = st, 3
    bad = storage_status(obj, now=NOW, observed=Observed(),
                         problems=[Problem("spec.nfs.pool", "no such pool")])
    assert bad["appliedGeneration"] == 2
    assert "appliedGeneration" not in storage_status(
        GOOD["nfs-dedicated"], now=NOW, observed=Observed(),
        problems=[Problem("spec.nfs.pool", "no such pool")])
