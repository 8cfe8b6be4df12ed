"""`nightshift simulate` on the real Karpenter KWOK provider.

- The KWOK stage of our own (hack/kwok/pod-sim-duration.yaml): each completion index of
  a Job ends after the quantile its index hashes to, as the simulator assumes.
- The command end to end, as a user runs it: two variants of a small run (spot with
  interruptions, on-demand); each runs on nodes of its capacity type, loses no item to
  interruptions, and takes at least its critical path in modelled time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.api import names
from nightshift.api.conditions import parse_rfc3339
from nightshift.kube import Kube
from nightshift.simulate import convert
from tests.clusterutil import ROOT, Kubectl, wait_for
from tests.integration.conftest import Cluster

ITEMS = 32
QUANTILES = [2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0]
SEED = 5


def expected_seconds(index: int) -> float:
    """The stage's jq expression, written again in Python as the test's oracle."""
    h = ((index + SEED) * 2654435761) % 2**32
    return QUANTILES[h * len(QUANTILES) // 2**32]


def test_each_index_ends_after_its_hashed_quantile(kube: Kube, kubectl: Kubectl,
                                                   namespace: str, pool: str) -> None:
    items = 8
    kubectl.apply({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "durations"},
        "spec": {"completionMode": "Indexed", "completions": items, "parallelism": items,
                 "template": {
                     "metadata": {"annotations": {
                         convert.SIM_SECONDS: ",".join(f"{q:g}" for q in QUANTILES),
                         convert.SIM_SEED: str(SEED), convert.KWOK_WEIGHT: "0",
                         **convert.INSTANT_STAGES}},
                     "spec": {"restartPolicy": "Never",
                              "nodeSelector": {names.LABEL_POOL: pool},
                              "tolerations": [{"key": names.TAINT_POOL, "operator": "Exists"}],
                              "containers": [{"name": "c", "image": "busybox:1.36"}]}}}},
        namespace)

    def pods() -> list[dict[str, Any]]:
        return kube.list("v1", "Pod", namespace, label_selector="job-name=durations")

    wait_for("8 pods Succeeded", lambda: len(ps := pods()) == items and all(
        p["status"].get("phase") == "Succeeded" for p in ps), 90)
    seen = {}
    for p in pods():
        index = int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
        (ready,) = [c for c in p["status"]["conditions"] if c["type"] == "Ready"]
        end = p["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
        start, stop = parse_rfc3339(ready["lastTransitionTime"]), parse_rfc3339(end)
        assert start and stop
        seen[index] = (stop - start).total_seconds()
    # API timestamps have 1-s resolution, and KWOK ends a pod late, never early, when
    # its queue runs behind (3 s late once in a CI run with eight test workers): each
    # end from 1.5 s before its quantile to 4.5 s after it.
    late = {i: round(seen[i] - expected_seconds(i), 1) for i in seen}
    assert all(-1.5 <= d <= 4.5 for d in late.values()), (seen, late)
    # ... and most on time: a quantile too high for every index would be 2 s late each.
    assert sorted(late.values())[len(late) // 2] <= 1.5, (seen, late)
    assert len({expected_seconds(i) for i in range(items)}) > 3  # the hash spreads them


MODEL = {"scale": 0.01, "bootSeconds": 100, "billing": "perSecond", "seed": 3,
         "stages": {"reduce": {"fixed": 600}, "combine": {"fixed": 300}}}
VARIANTS = {"spot": {"spotInterruptionsPerHour": 4},
            "on-demand": {"virtualCluster": {"pools": {"*": {"capacity": "on-demand"}}}}}


def manifests() -> list[dict[str, Any]]:
    vc = {"apiVersion": names.API_VERSION, "kind": names.VIRTUALCLUSTER,
          "metadata": {"name": "simvc"},
          "spec": {"pools": [{"name": "work", "class": "compute", "capacity": "spot",
                              "instanceTypes": ["c5.xlarge"], "maxCPU": 32}]}}
    run = {"apiVersion": names.API_VERSION, "kind": names.PIPELINERUN,
           "metadata": {"name": "simrun"},
           "spec": {"virtualCluster": "simvc", "stages": [
               {"name": "reduce", "forEach": {"range": {"from": 1, "to": ITEMS}},
                "image": "example/reduce:1", "resources": {"requests": {"cpu": "1"}},
                "steps": [{"name": "r", "command": ["reduce"]}],
                "outputs": [{"storage": "s", "path": "out/{item}/"}]},
               {"name": "combine", "dependsOn": ["reduce"], "image": "example/combine:1",
                "resources": {"requests": {"cpu": "2"}},
                "steps": [{"name": "c", "command": ["combine"]}]}],
               "storage": [{"name": "s", "s3": {"bucket": "sim-data"}}]}}
    return [vc, run]


def test_simulate_compare_two_variants(cluster: Cluster, crds: list[str],
                                       tmp_path: Path) -> None:
    if not cluster.local or not cluster.instance_catalog:
        pytest.skip("needs the local cluster: its KWOK loads hack/kwok/pod-sim-duration.yaml "
                    "and its Karpenter reads the instance catalog")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump_all(manifests()))
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(MODEL))
    (tmp_path / "variants.yaml").write_text(yaml.safe_dump(VARIANTS))
    proc = subprocess.run(
        [sys.executable, "-m", "nightshift.cli.main", "simulate", str(tmp_path / "run.yaml"),
         "--durations", str(tmp_path / "model.yaml"), "--compare",
         str(tmp_path / "variants.yaml"), "--timeout", "300", "-o", "json"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, **cluster.operator_env()}, check=False)
    # stdout's JSON has a timed-out variant's phase with the run's own why.
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-3000:]
    results = {r["variant"]: r for r in json.loads(proc.stdout)["results"]}
    assert set(results) == {"spot", "on-demand"}
    for name, r in results.items():
        assert r["phase"] == "Succeeded", r
        # Nothing lost or doubled: every item once, interruptions or not.
        assert r["items"] == {"succeeded": ITEMS + 1, "failed": 0, "total": ITEMS + 1}, r
        # The critical path (600 s, then 300 s) is a floor: durations came from the model.
        assert r["makespanHours"] >= 0.25, r
        capacity = "on-demand" if name == "on-demand" else "spot"
        assert r["nodeMix"] and all(k.endswith(f"c5.xlarge {capacity}")
                                    for k in r["nodeMix"]), r
        assert r["costUSD"] > 0 and r["unpricedNodes"] == 0, r
        assert 0 < r["utilisation"] <= 1, r
    assert results["on-demand"]["interruptions"] == 0
    # 32 one-CPU items on 4-CPU nodes keep ~10 spot nodes up for 0.25 modelled hours:
    # at 4 interruptions per node-hour, P(none) = exp(-4 x 2.5) < 0.01%.
    assert results["spot"]["interruptions"] >= 1, results["spot"]
