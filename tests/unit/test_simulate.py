"""`nightshift simulate`'s pure parts: duration models, the conversion of a run and its
VirtualCluster for KWOK, and the report (cost, peak, utilisation) from hand-made nodes."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
import yaml

from nightshift.cli import simulate as cli
from nightshift.cli.main import main
from nightshift.simulate import convert, model, report, variantcheck
from tests.clusterutil import ROOT
from tests.golden_util import check_golden

CHILES = ROOT / "examples" / "chiles"
DURATIONS, VARIANTS = CHILES / "simulate" / "durations.yaml", CHILES / "simulate" / "variants.yaml"


def chiles() -> tuple[dict[str, Any], dict[str, Any], model.Model]:
    run, vc = convert.pick(cli.documents([str(CHILES)]), None)
    m = model.parse(yaml.safe_load((DURATIONS).read_text()), CHILES)
    return run, vc, m


# -- models ------------------------------------------------------------------------------

def test_fixed_normal_lognormal_quantiles() -> None:
    m = model.parse({"stages": {"a": {"fixed": 60}, "b": {"normal": {"mean": 100, "sd": 10}},
                                "c": {"lognormal": {"median": 50, "sigma": 0.5}}}})
    assert m.stages["a"] == [60.0]
    b, c = m.stages["b"], m.stages["c"]
    assert len(b) == len(c) == model.QUANTILES
    z0 = NormalDist().inv_cdf(0.5 / model.QUANTILES)  # the lowest quantile's z
    assert b[0] == pytest.approx(100 + 10 * z0)
    assert c[0] == pytest.approx(50 * math.exp(0.5 * z0))
    assert b == sorted(b) and sum(b) / len(b) == pytest.approx(100, abs=0.01)
    # The middle two quantiles straddle the median.
    assert c[31] < 50 < c[32]


def test_normal_is_truncated_at_zero() -> None:
    m = model.parse({"stages": {"a": {"normal": {"mean": 1, "sd": 10}}}})
    assert min(m.stages["a"]) == 0.0


def test_batched_pod_is_the_sum_of_its_items() -> None:
    m = model.parse({"stages": {"a": {"fixed": 30}, "b": {"normal": {"mean": 100, "sd": 20}}}})
    assert m.pod_quantiles("a", batch=4) == [120.0]
    b4 = m.pod_quantiles("b", batch=4)
    mean = sum(b4) / len(b4)
    assert mean == pytest.approx(400, rel=0.02)
    # The sum of 4 independent draws spreads by sqrt(4) = 2 sd, not 4 sd.
    spread = b4[-1] - b4[0]
    one = m.pod_quantiles("b")
    assert 1.5 * (one[-1] - one[0]) < spread < 2.5 * (one[-1] - one[0])


def test_csv_of_task_records(tmp_path: Path) -> None:
    (tmp_path / "r.csv").write_text("run,stage,index,seconds\nx,a,0,10\nx,a,1,30\n"
                                    "x,b,0,999\nx,a,2,20\n")
    m = model.parse({"stages": {"a": {"fromCSV": {"file": "r.csv"}},
                                "z": {"fromCSV": {"file": "r.csv", "stage": "b"}}}}, tmp_path)
    assert sorted(set(m.stages["a"])) == [10.0, 20.0, 30.0]
    assert set(m.stages["z"]) == {999.0}


@pytest.mark.parametrize(("raw", "says"), [
    ({}, "stages: missing"),
    ({"stages": {"a": {"uniform": 3}}}, "stages.a: {'uniform': 3} is not one of"),
    ({"stages": {"a": {"normal": {"mean": 5}}}}, "stages.a.normal.sd"),
    ({"stages": {"a": {"fixed": -1}}}, "stages.a.fixed: -1 is not a number >= 0"),
    ({"stages": {"a": {"fixed": 1}}, "billing": "perMinute"}, "billing: 'perMinute'"),
    ({"stages": {"a": {"fixed": 1}}, "scale": 0}, "scale: 0 is not a number"),
    ({"stages": {"a": {"fixed": 1}}, "items": {"a": 0}}, "items: give a positive count"),
    ({"stages": {"a": {"fixed": 1}}, "sclae": 1}, "unknown field(s) ['sclae']"),
    ({"stages": {"a": {"fromCSV": {"file": "nope.csv"}}}}, "stages.a.fromCSV.file: cannot"),
])
def test_bad_models_name_the_field(raw: dict[str, Any], says: str) -> None:
    with pytest.raises(model.ModelError, match=None) as e:
        model.parse(raw)
    assert says in str(e.value)


def test_csv_without_the_columns(tmp_path: Path) -> None:
    (tmp_path / "r.csv").write_text("name,time\na,1\n")
    with pytest.raises(model.ModelError, match="no `stage` and `seconds` columns"):
        model.parse({"stages": {"a": {"fromCSV": {"file": "r.csv"}}}}, tmp_path)


def test_annotation_is_real_seconds_with_a_floor() -> None:
    m = model.Model(scale=0.01)
    assert model.annotation([3600, 10, 125], m) == "36,0.5,1.25"


# -- conversion --------------------------------------------------------------------------

def test_chiles_conversion_golden() -> None:
    run, vc, m = chiles()
    check_golden("simulate/chiles.yaml", [convert.virtual_cluster(vc, m, "sim-ns"),
                                          convert.pipeline_run(run, m, "sim-ns")])


def test_conversion_keeps_the_shape_and_compresses_time() -> None:
    run, vc, m = chiles()
    sv = convert.virtual_cluster(vc, m, "ns")
    assert sv["spec"]["nodeClass"] == {"kwok": {"nodeRegistrationDelay": "0s"}}  # 120 s x 0.002
    assert [p["name"] for p in sv["spec"]["pools"]] == ["copy", "split", "imaging", "concat"]
    assert all(p["consolidateAfter"] == "0s" for p in sv["spec"]["pools"])  # 2m x 0.002
    sr = convert.pipeline_run(run, m, "ns")
    spec = sr["spec"]
    assert "storage" not in spec and "archive" not in spec
    assert spec["launch"] == {"maxPodsPerMinute": 3000}  # 6 a minute, 500x faster
    invert = spec["stages"][2]
    assert invert["dependsOn"] == ["split"] and invert["retries"] == {"perItem": 3}
    assert invert["resources"] == {"requests": {"cpu": "14", "memory": "110Gi"}}
    assert "inputs" not in invert and "outputs" not in invert
    seconds = [float(s) for s in invert["podAnnotations"][convert.SIM_SECONDS].split(",")]
    assert len(seconds) == model.QUANTILES
    assert sorted(seconds)[31] < 15600 * 0.002 < sorted(seconds)[32]
    # split asks for 70Gi of ephemeral storage, which KWOK's nodes do not have.
    assert spec["stages"][1]["resources"] == {"requests": {"cpu": "3", "memory": "12Gi"}}


def test_variants_patch_pools_by_name_or_all_and_the_spec() -> None:
    run, vc, m = chiles()
    v = {"virtualCluster": {"pools": {"*": {"capacity": "on-demand"},
                                      "imaging": {"maxCPU": 64}}},
         "pipelineRun": {"launch": None, "stages": {"copy": {"parallelism": 4}}}}
    pools = convert.virtual_cluster(vc, m, "ns", v)["spec"]["pools"]
    assert {p["capacity"] for p in pools} == {"on-demand"}
    assert [p.get("maxCPU") for p in pools if p["name"] == "imaging"] == [64]
    spec = convert.pipeline_run(run, m, "ns", v)["spec"]
    assert "launch" not in spec
    assert spec["stages"][0]["parallelism"] == 4


def test_a_variant_naming_no_pool_is_refused() -> None:
    _, vc, m = chiles()
    with pytest.raises(convert.SimulationError, match=r"pools: no entry named \['gpu'\]"):
        convert.virtual_cluster(vc, m, "ns", {"virtualCluster": {"pools": {"gpu": {}}}})


def test_a_variants_misspelled_field_is_named_not_dropped() -> None:
    run, vc, _ = chiles()
    good = {"virtualCluster": {"pools": {"*": {"capacity": "on-demand"}}},
            "pipelineRun": {"stages": {"copy": {"parallelism": 4}}}}
    variantcheck.check("wider", vc, run, good)
    variantcheck.check("as-written", vc, run, {})
    typo = {"pipelineRun": {"stages": {"copy": {"paralellism": 4}}}}
    with pytest.raises(convert.SimulationError) as err:
        variantcheck.check("wider", vc, run, typo)
    assert str(err.value) == ("variant 'wider': the PipelineRun 'chiles-epoch1' it gives is "
                              'not valid: unknown field "spec.stages[0].paralellism"')
    bad = {"virtualCluster": {"pools": {"*": {"capacity": "reserved"}}}}
    with pytest.raises(convert.SimulationError, match=r"variant 'x': the VirtualCluster .* "
                       r"spec.pools\[0\].capacity"):
        variantcheck.check("x", vc, run, bad)


@pytest.mark.parametrize(("variant", "says"), [
    ({"virtualCluster": {"pools": [{"name": "imaging", "capacity": "spot"}]}},
     "virtualCluster.pools: a mapping of pool name"),
    ({"virtualCluster": "on-demand"}, "virtualCluster: a mapping of the fields to change"),
    ({"pipelineRun": {"stages": {"copy": 4}}}, "pipelineRun.stages: a mapping of stage name"),
])
def test_a_variant_of_the_wrong_shape_is_named(variant: dict[str, Any], says: str) -> None:
    run, vc, _ = chiles()
    with pytest.raises(convert.SimulationError, match=f"variant 'v': {says}"):
        variantcheck.check("v", vc, run, variant)


def test_unreadable_item_sources_need_a_count() -> None:
    run = {"apiVersion": "nightshift.io/v1alpha1", "kind": "PipelineRun",
           "metadata": {"name": "r"}, "spec": {"virtualCluster": "vc", "stages": [
               {"name": "a", "forEach": {"fromS3": {"storage": "s", "prefix": "x/"}},
                "image": "i", "steps": [{"name": "s", "command": ["x"]}]}]}}
    m = model.parse({"stages": {"a": {"fixed": 60}}})
    with pytest.raises(convert.SimulationError,
                       match=r"spec.stages\[0\].forEach.fromS3: .*`items: \{a: 400\}`"):
        convert.pipeline_run(run, m, "ns")
    m = model.parse({"stages": {"a": {"fixed": 60}}, "items": {"a": 7}})
    assert convert.pipeline_run(run, m, "ns")["spec"]["stages"][0]["forEach"] == {
        "range": {"from": 0, "to": 6}}


def test_a_stage_without_a_model_is_named() -> None:
    run, _, _ = chiles()
    m = model.parse({"stages": {"copy": {"fixed": 1}}})
    with pytest.raises(convert.SimulationError, match=r"stages.split: missing.*"
                       r"`split: \{fixed: 60\}`"):
        convert.pipeline_run(run, m, "ns")


def test_converted_manifests_pass_validate(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    run, vc, m = chiles()
    f = tmp_path / "sim.yaml"
    f.write_text(yaml.safe_dump_all([convert.virtual_cluster(vc, m, "ns"),
                                     convert.pipeline_run(run, m, "ns")]))
    assert main(["validate", str(f), "--provider", "kwok"]) == 0, capsys.readouterr()


def test_pick_needs_the_virtual_cluster() -> None:
    run, _ = convert.pick(cli.documents([str(CHILES)]), None)
    with pytest.raises(convert.SimulationError, match=r"spec\.virtualCluster 'chiles', "
                       r"which is not in the manifests"):
        convert.pick([run], None)


# -- variants file -----------------------------------------------------------------------

def test_variants_file(tmp_path: Path) -> None:
    names = [n for n, _ in cli.variants(str(VARIANTS), [])]
    assert names[:2] == ["spot", "on-demand"]
    assert [n for n, _ in cli.variants(str(VARIANTS), ["on-demand"])] == [
        "on-demand"]
    assert cli.variants(None, []) == [("as-written", {})]
    bad = tmp_path / "v.yaml"
    bad.write_text("x: {virtualClusters: {}}\n")
    with pytest.raises(convert.SimulationError, match=r"x: unknown field\(s\) "
                       r"\['virtualClusters'\]"):
        cli.variants(str(bad), [])
    with pytest.raises(convert.SimulationError, match=r"--variant \['y'\]: not in"):
        cli.variants(str(VARIANTS), ["y"])


# -- report ------------------------------------------------------------------------------

def nodes() -> list[report.Node]:
    # Real seconds at scale 0.01: 36 s real = 1 modelled hour.
    return [report.Node("a", "p", "m5.large", "spot", launched=0, gone=36, hourly_usd=0.1),
            report.Node("b", "p", "m5.large", "spot", launched=10, gone=46.36, hourly_usd=0.1),
            report.Node("c", "q", "r5.large", "on-demand", launched=20, gone=None,
                        hourly_usd=None)]


def test_report_by_the_hour_and_by_the_second() -> None:
    o = report.Outcome("v", created=0, finished=72, phase="Succeeded",
                       items={"succeeded": 9, "failed": 1, "total": 10}, nodes=nodes(),
                       run_cost={"usedUSD": 0.001})
    hourly = report.result(o, model.Model(scale=0.01, billing="perHour"), end=100)
    # a: exactly 1 h -> 1 h; b: 1.01 h -> 2 h; c unpriced (52 s real = 1.44 h).
    assert hourly.cost_usd == pytest.approx(0.3)
    assert hourly.unpriced_nodes == 1
    assert hourly.makespan_hours == pytest.approx(2.0)
    assert hourly.node_hours == pytest.approx(1 + 1.01 + 52 / 36)
    assert hourly.peak_nodes == 3
    assert hourly.node_mix == (("p: m5.large spot", 2), ("q: r5.large on-demand", 1))
    # Utilisation: used 0.1 of what a and b cost by the second (72.36 s x 0.1/3600).
    assert hourly.utilisation == pytest.approx(0.001 / (72.36 * 0.1 / 3600))
    second = report.result(o, model.Model(scale=0.01, billing="perSecond"), end=100)
    assert second.cost_usd == pytest.approx(0.1 * (1 + 1.01))


def test_table_rows() -> None:
    o = report.Outcome("spot", created=0, finished=None, phase="TimedOut (x)",
                       items={"succeeded": 3, "failed": 0, "total": 5}, nodes=nodes())
    rows = report.table_rows([report.result(o, model.Model(scale=0.01), end=100)])
    assert rows[0][0] == "VARIANT" and rows[1][:4] == ["spot", "TimedOut (x)", "-", "3/5"]
    assert "(+1 unpriced)" in rows[1][6]
    assert rows[1][-1] == "2x p: m5.large spot, 1x q: r5.large on-demand"


def test_run_items_sums_the_stages() -> None:
    status = {"stages": [{"total": 3, "succeeded": 2, "failed": 1}, {"total": 1}]}
    assert report.run_items(status) == {"succeeded": 2, "failed": 1, "total": 4}


def test_stage_hours_from_status_times() -> None:
    from nightshift.simulate.session import _epoch

    status = {"stages": [{"name": "a", "startTime": "2026-01-01T00:00:00Z",
                          "completionTime": "2026-01-01T00:00:36Z"},
                         {"name": "b", "startTime": "2026-01-01T00:00:36Z"}]}
    secs = report.stage_seconds(status, _epoch)
    assert secs == {"a": 36.0}
    o = report.Outcome("v", created=0, finished=40, phase="Succeeded", stage_seconds=secs)
    r = report.result(o, model.Model(scale=0.01), end=40)
    assert [k for k, _ in r.stage_hours] == ["a"]
    assert r.stage_hours[0][1] == pytest.approx(1.0)
    assert report.table_rows([r])[1][-2] == "a=1.0"


def test_spot_fraction_and_interrupted_spot_by_the_hour() -> None:
    m = model.parse({"stages": {"a": {"fixed": 1}}, "spotFraction": 0.12, "billing": "perHour",
                     "scale": 0.01})
    spot = report.Node("s", "p", "r3.4xlarge", "spot", launched=0, gone=90, hourly_usd=1.176,
                       on_demand_usd=1.68)
    # 2.5 modelled hours -> 3 started hours at 12% of on-demand.
    assert report.node_usd(spot, m, 9000) == pytest.approx(3 * 0.12 * 1.68)
    spot.interrupted = True  # EC2 did not bill the hour it interrupted
    assert report.node_usd(spot, m, 9000) == pytest.approx(2 * 0.12 * 1.68)
    od = report.Node("o", "p", "r3.4xlarge", "on-demand", launched=0, hourly_usd=1.68,
                     on_demand_usd=1.68)
    assert report.node_usd(od, m, 9000) == pytest.approx(3 * 1.68)
    with pytest.raises(model.ModelError, match=r"spotFraction: 2 is not a number in \(0, 1\]"):
        model.parse({"stages": {"a": {"fixed": 1}}, "spotFraction": 2})


@pytest.mark.parametrize("example", sorted(p.parent.parent.name for p in
                                           (ROOT / "examples").glob("*/simulate/variants.yaml")))
def test_the_examples_variants_pass_the_check(example: str) -> None:
    run, vc = convert.pick(cli.documents([str(ROOT / "examples" / example)]), None)
    for name, patch in cli.variants(str(ROOT / "examples" / example / "simulate" /
                                        "variants.yaml"), []):
        variantcheck.check(name, vc, run, patch)


def test_a_run_no_operator_reconciles_ends_with_that_said(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # --use-running-operator with none running: the run never gets a status. The watch
    # says so after a minute instead of waiting out --timeout (30 minutes by default).
    from io import StringIO

    from rich.console import Console

    from nightshift.simulate import session

    run, vc, m = chiles()
    sim = session.Simulation("as-written", convert.virtual_cluster(vc, m, "sim-ab12-x"),
                             convert.pipeline_run(run, m, "sim-ab12-x"), m)

    class NoOperator:
        def get(self, *args: Any, **kw: Any) -> dict[str, Any]:
            return {"metadata": {"name": "r"}}  # created, never reconciled: no status

        def list(self, *args: Any, **kw: Any) -> list[dict[str, Any]]:
            return []

    ticks = iter(range(0, 10_000, 5))
    monkeypatch.setattr("nightshift.simulate.session.time.sleep", lambda s: None)
    runner = session.Runner(NoOperator(), m, Console(file=StringIO()),  # type: ignore[arg-type]
                            timeout=1800, clock=lambda: float(next(ticks)))
    out = runner._watch(sim, 0.0, lambda: None)
    assert out.phase == ("NotReconciled (no operator wrote the run's status in 60 s: is one "
                         "running, watching namespace sim-ab12-x? Without "
                         "--use-running-operator the command starts its own)"), out.phase
