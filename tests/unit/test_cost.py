"""Cost arithmetic against hand-computed cases: billing, the VirtualCluster's node
ledger, and a run's stages integrated from Job Ready counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nightshift.api.billing import billed_seconds, charge, node_usd_at
from nightshift.api.conditions import rfc3339
from nightshift.pipelinerun import cost
from nightshift.virtualcluster.cost import node_cost

T0 = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_billing_minimums() -> None:
    assert billed_seconds(10, "perSecond") == 60
    assert billed_seconds(61.5, "perSecond") == 61.5
    assert billed_seconds(1, "perHour") == 3600
    assert billed_seconds(3601, "perHour") == 7200
    # 0.17 $/h for 90 s: 90 * 0.17 / 3600
    assert charge(90, 0.17, "perSecond") == pytest.approx(0.00425)
    assert charge(90, 0.17, "perHour") == pytest.approx(0.17)


def claim(name: str, launched: float | None, itype: str = "c5.large", cap: str = "spot",
          pool: str = "work") -> dict[str, Any]:
    conds = ([{"type": "Launched", "status": "True", "lastTransitionTime": rfc3339(at(launched))}]
             if launched is not None else [])
    return {"metadata": {"name": name, "labels": {
        "nightshift.io/pool": pool, "node.kubernetes.io/instance-type": itype,
        "karpenter.sh/capacity-type": cap}}, "status": {"conditions": conds}}


PRICES = {("c5.large", "spot"): 0.036, ("c5.large", "on-demand"): 0.085}


def test_node_ledger_by_hand() -> None:
    # a: launched at 0, gone at 300 (watch time 299.5). b: launched at 100, still up at
    # 400. c: not launched yet (no price, no charge).
    first = node_cost(None, [claim("a", 0), claim("b", 100, cap="on-demand"), claim("c", None)],
                      PRICES, "perSecond", at(200))
    assert [n["name"] for n in first["open"]] == ["a", "b"]
    assert first["totalUSD"] == pytest.approx(200 * 0.036 / 3600 + 100 * 0.085 / 3600)
    later = node_cost(first, [claim("b", 100, cap="on-demand")], PRICES, "perSecond", at(400),
                      gone_at={"a": at(299.5)})
    want = 299.5 * 0.036 / 3600 + 300 * 0.085 / 3600
    assert later["totalUSD"] == pytest.approx(want, abs=1e-6)
    assert later["pools"][0]["endedUSD"] == pytest.approx(299.5 * 0.036 / 3600, abs=1e-6)
    assert [n["name"] for n in later["open"]] == ["b"]
    assert later["since"] == first["since"]
    # Between passes, the running node accrues: node_usd_at extrapolates.
    assert node_usd_at({"cost": later}, at(500)) == pytest.approx(want + 100 * 0.085 / 3600,
                                                                  abs=1e-6)


def test_short_node_pays_the_minimum_and_per_hour_rounds_up() -> None:
    first = node_cost(None, [claim("a", 0)], PRICES, "perHour", at(10))
    done = node_cost(first, [], PRICES, "perHour", at(30))
    assert done["totalUSD"] == pytest.approx(0.036)
    first = node_cost(None, [claim("a", 0)], PRICES, "perSecond", at(10))
    done = node_cost(first, [], PRICES, "perSecond", at(30))
    assert done["totalUSD"] == pytest.approx(60 * 0.036 / 3600)


def test_unknown_price_is_counted_not_guessed() -> None:
    out = node_cost(None, [claim("a", 0, itype="x9.huge")], PRICES, "perSecond", at(60))
    assert out["totalUSD"] == 0 and out["unpricedNodes"] == 1


def job(name: str, stage: str, ready: int, cpu: str = "1", mem: str = "1Gi") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nightshift.io/stage": stage}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}}},
            "status": {"ready": ready}}


VC = {"pools": [{"name": "work", "cpu": 8, "memory": "32Gi", "hourlyUSD": 0.72}],
      # One node, up for 600 s when the run starts.
      "cost": {"billing": "perSecond", "totalUSD": 0.12, "observedAt": rfc3339(T0),
               "open": [{"name": "n", "hourlyUSD": 0.72, "since": rfc3339(at(-600))}]}}


def test_stage_integrates_ready_counts_by_hand() -> None:
    # 1 CPU of 8 on a 0.72 $/h pool: 0.72/8/3600 = 2.5e-5 $ per pod-second (CPU dominant:
    # 1 GiB of 32 is 1/32 < 1/8).
    rates = cost.stage_rates([job("j", "a", 0)], {"a": "work"}, VC)
    assert rates == {"a": pytest.approx(2.5e-5)}
    c, tally = cost.advance(None, None, [], [job("j", "a", 0)], rates, VC, at(0))
    # The watch saw 4 Ready at 10 s, 6 at 20 s, 0 at 50 s; the pass runs at 60 s.
    samples = [(at(10), "j", "a", 4), (at(20), "j", "a", 6), (at(50), "j", "a", 0)]
    c, tally = cost.advance(c, tally, samples, [job("j", "a", 0)], rates, VC, at(60))
    pod_s = 4 * 10 + 6 * 30
    (st,) = c["stages"]
    assert st["podSeconds"] == pytest.approx(pod_s)
    assert st["usedUSD"] == pytest.approx(pod_s * 2.5e-5)
    # The VirtualCluster's one node ran the 60 s at 0.72 $/h: node 0.012 $, idle the rest.
    assert c["nodeUSD"] == pytest.approx(0.012)
    assert c["idleUSD"] == pytest.approx(0.012 - pod_s * 2.5e-5)
    assert c["totalUSD"] == pytest.approx(0.012)


def test_restart_carries_on_from_status() -> None:
    rates = {"a": 2.5e-5}
    c, _ = cost.advance(None, None, [], [job("j", "a", 3)], rates, VC, at(0))
    # The operator restarts: no tally, no samples; status.cost says 3 were Ready at 0.
    c2, _ = cost.advance(c, None, [], [job("j", "a", 3)], rates, VC, at(20))
    assert c2["stages"][0]["podSeconds"] == pytest.approx(60)


def test_seconds_before_a_price_are_priced_once_one_is_known() -> None:
    c, t = cost.advance(None, None, [], [job("j", "a", 2)], {}, None, at(0))
    c, t = cost.advance(c, t, [], [job("j", "a", 2)], {}, None, at(10))
    assert c["stages"][0]["usedUSD"] == 0 and c["stages"][0]["podSeconds"] == 20
    c, t = cost.advance(c, t, [], [job("j", "a", 2)], {"a": 1e-3}, VC, at(15))
    assert c["stages"][0]["usedUSD"] == pytest.approx(30 * 1e-3)


def test_ended_run_is_frozen() -> None:
    c, t = cost.advance(None, None, [], [job("j", "a", 2)], {"a": 1e-3}, VC, at(0))
    c, t = cost.advance(c, t, [], [job("j", "a", 2)], {"a": 1e-3}, VC, at(10))
    frozen, _ = cost.advance(c, t, [], [job("j", "a", 2)], {"a": 1e-3}, VC, at(100),
                             frozen=True)
    # Its figures stay; only the node baseline goes (a rerun starts from nodeUSD).
    assert frozen == {k: v for k, v in c.items() if k != "nodeUSDAtStart"}
    again, _ = cost.advance(frozen, None, [], [], {"a": 1e-3}, VC, at(200), frozen=True)
    assert again == frozen  # nothing to write while it stands ended


def test_memory_dominant_share() -> None:
    # 8 GiB of 32 (1/4) outweighs 1 CPU of 8: priced at a quarter of the pool.
    rates = cost.stage_rates([job("j", "a", 0, mem="8Gi")], {"a": "work"}, VC)
    assert rates["a"] == pytest.approx(0.72 / 4 / 3600)


def test_a_node_unpriced_at_first_is_priced_once_known_for_its_whole_time() -> None:
    first = node_cost(None, [claim("a", 0)], {}, "perSecond", at(60))  # lookup failed
    assert first["unpricedNodes"] == 1 and first["totalUSD"] == 0
    later = node_cost(first, [claim("a", 0)], PRICES, "perSecond", at(120))
    assert "unpricedNodes" not in later
    assert later["totalUSD"] == pytest.approx(120 * 0.036 / 3600, abs=1e-9)


def test_a_rerun_goes_on_from_the_node_cost_it_ended_with() -> None:
    # The run used 0.012 $ of node time, ended, and stood a day while the VirtualCluster
    # ran other work; rerun-failed starts it again: the day is not the run's.
    c, t = cost.advance(None, None, [], [job("j", "a", 1)], {"a": 1e-5}, VC, at(0))
    c, t = cost.advance(c, t, [], [job("j", "a", 1)], {"a": 1e-5}, VC, at(60))
    assert c["nodeUSD"] == pytest.approx(0.012)
    c, t = cost.advance(c, t, [], [], {"a": 1e-5}, VC, at(120), frozen=True)
    day = at(86_400)
    c, t = cost.advance(c, t, [], [job("j2", "a", 1)], {"a": 1e-5}, VC, day)
    assert c["nodeUSD"] == pytest.approx(0.012)  # not 0.012 + a day of the node
    c, t = cost.advance(c, t, [], [job("j2", "a", 1)], {"a": 1e-5}, VC,
                        day + timedelta(seconds=60))
    assert c["nodeUSD"] == pytest.approx(0.024)


def test_a_restart_counts_a_stage_once_when_the_watch_speaks_first() -> None:
    rates = {"a": 2.5e-5}
    c, _ = cost.advance(None, None, [], [job("j", "a", 3)], rates, VC, at(0))
    # Restarted: the Job watch's initial listing (3 Ready at 5 s) comes before the pass.
    c2, _ = cost.advance(c, None, [(at(5), "j", "a", 3)], [job("j", "a", 3)], rates, VC,
                         at(20))
    assert c2["stages"][0]["podSeconds"] == pytest.approx(60)  # 3 pods x 20 s, not 105


def test_a_ready_change_after_the_job_list_is_kept() -> None:
    rates = {"a": 2.5e-5}
    c, t = cost.advance(None, None, [], [job("j", "a", 0)], rates, VC, at(0))
    # The pass listed its Jobs at 5 s (0 Ready); 4 became Ready at 5.5 s; the pass ends
    # at 6 s and the next runs at 16 s.
    c, t = cost.advance(c, t, [(at(5.5), "j", "a", 4)], [job("j", "a", 0)], rates, VC, at(6),
                        listed_at=at(5))
    c, t = cost.advance(c, t, [], [job("j", "a", 4)], rates, VC, at(16), listed_at=at(15))
    assert c["stages"][0]["podSeconds"] == pytest.approx(4 * 10.5)


def test_a_node_that_ends_unpriced_is_priced_if_it_can_be_and_counted_if_not() -> None:
    first = node_cost(None, [claim("a", 0), claim("b", 0, itype="x9.huge")], {}, "perSecond",
                      at(60))
    assert first["unpricedNodes"] == 2
    assert all("hourlyUSD" not in n for n in first["open"])  # never null (merge patches)
    # Both end; a's price is known now, b's never is.
    done = node_cost(first, [], PRICES, "perSecond", at(120))
    assert done["totalUSD"] == pytest.approx(120 * 0.036 / 3600, abs=1e-9)
    assert "unpricedNodes" not in done and done["unpricedEndedNodes"] == 1
    assert done["nodeHours"] == pytest.approx(240 / 3600, abs=1e-4)
    assert node_cost(done, [], PRICES, "perSecond", at(180))["unpricedEndedNodes"] == 1


def test_a_pool_with_an_unpriced_node_has_no_price() -> None:
    from nightshift.virtualcluster.provider import ProviderChoice
    from nightshift.virtualcluster.status import virtualcluster_status
    from tests.unit import vcfixtures

    vc = vcfixtures.vc(vcfixtures.POOLS["spot-compute"], provider="kwok")
    pool = vc["spec"]["pools"][0]["name"]

    def node(name: str, cap: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {
            "nightshift.io/pool": pool, "node.kubernetes.io/instance-type": "c6i.2xlarge",
            "karpenter.sh/capacity-type": cap}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}}}

    nodes = [node("od", "on-demand"), *(node(f"s{i}", "spot") for i in range(3))]
    status = virtualcluster_status(
        vc, choice=ProviderChoice("kwok", "karpenter", ""), nodes=nodes,
        price=lambda _t, c: 0.34 if c == "on-demand" else None)
    (entry,) = status["pools"]
    assert entry["unpricedNodes"] == 3 and "hourlyUSD" not in entry
    assert "hourlyUSD" not in status
    assert cost.pool_rates(status) == {}  # a run's pods there are unpriced, not cheap


def _status_write(t: float) -> dict[str, Any]:
    # The Job controller's status entry and the operator's own apply (which must not count).
    return {"managedFields": [
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
         "time": rfc3339(at(t))},
        {"manager": "nightshift", "operation": "Apply", "time": rfc3339(at(t + 30))}]}


def test_a_ready_change_is_timed_by_its_status_write_not_by_a_late_watch_event() -> None:
    # Written at 10.x s (the API server keeps whole seconds), seen at 13 s: at most 11 s.
    assert cost.write_time(at(13), _status_write(10)) == at(11)
    # Seen within that second: the arrival itself is the closer bound.
    assert cost.write_time(at(10.4), _status_write(10)) == at(10.4)
    # Never after the arrival, whatever the managed fields say.
    assert cost.write_time(at(9), _status_write(10)) == at(9)
    # No status entry (a Job whose status no one wrote): the arrival.
    assert cost.write_time(at(13), {"managedFields": []}) == at(13)
    assert cost.write_time(at(13), {}) == at(13)


def test_a_change_written_before_the_last_pass_but_seen_after_it_counts_from_its_write(
) -> None:
    rates = {"a": 2.5e-5}
    c, t = cost.advance(None, None, [], [job("j", "a", 0)], rates, VC, at(0))
    # The pass listed 0 Ready at 5 s and ended at 6 s; 4 became Ready at 5.5 s, but the
    # event came after the pass, timed by its write at 5.5 s: 4 pods from 5.5 s (the
    # pass counted 0 until 6 s; the next one adds the half second owed).
    c, t = cost.advance(c, t, [], [job("j", "a", 0)], rates, VC, at(6), listed_at=at(5))
    c, t = cost.advance(c, t, [(at(5.5), "j", "a", 4)], [job("j", "a", 4)], rates, VC, at(16),
                        listed_at=at(15))
    assert c["stages"][0]["podSeconds"] == pytest.approx(4 * 10.5)


def test_a_change_the_list_has_before_its_event_counts_from_the_jobs_status_write(
) -> None:
    """Under load a pass can list a Job whose newest count's event has not come: the
    list's count holds from the Job's last status write, not from the next pass (which
    undercounted starts and overcounted ends by a pass or more each)."""
    rates = {"a": 2.5e-5}
    c, t = cost.advance(None, None, [], [job("j", "a", 0)], rates, VC, at(0), listed_at=at(0))
    # Listed at 10 s: 4 Ready, the Job's status written in second 7 (so before 8 s).
    seen = {**job("j", "a", 4), "metadata": {**job("j", "a", 4)["metadata"],
                                             **_status_write(7)}}
    c, t = cost.advance(c, t, [], [seen], rates, VC, at(11), listed_at=at(10))
    assert c["stages"][0]["podSeconds"] == pytest.approx(4 * 3)
    # Its event comes in the next pass, timed by the same write: the list had it.
    late = (cost.write_time(at(12), seen["metadata"]), "j", "a", 4)
    c, t = cost.advance(c, t, [late], [seen], rates, VC, at(21), listed_at=at(20))
    assert c["stages"][0]["podSeconds"] == pytest.approx(4 * 13)
    # And the end alike: 0 Ready written in second 30, listed at 33, the pass ends at 34.
    gone = {**job("j", "a", 0), "metadata": {**job("j", "a", 0)["metadata"],
                                             **_status_write(30)}}
    c, t = cost.advance(c, t, [], [gone], rates, VC, at(34), listed_at=at(33))
    assert c["stages"][0]["podSeconds"] == pytest.approx(4 * 23)


def test_a_change_is_never_owed_from_before_the_last_list() -> None:
    rates = {"a": 2.5e-5}
    c, t = cost.advance(None, None, [], [job("j", "a", 0)], rates, VC, at(0), listed_at=at(0))
    c, t = cost.advance(c, t, [], [job("j", "a", 0)], rates, VC, at(10), listed_at=at(9))
    # A sample whose write bound (9.5 s) is after that list but whose count the list did
    # not have: owed from 9.5 s. One timed before the list (8 s) is dropped: it had it.
    c, t = cost.advance(c, t, [(at(8), "j", "a", 7), (at(9.5), "j", "a", 2)],
                        [job("j", "a", 2)], rates, VC, at(20), listed_at=at(19))
    assert c["stages"][0]["podSeconds"] == pytest.approx(2 * 10.5)


def test_one_jobs_changes_in_one_second_keep_their_order() -> None:
    rates = {"a": 2.5e-5}
    c, t = cost.advance(None, None, [], [job("j", "a", 0)], rates, VC, at(0), listed_at=at(0))
    # 5 Ready, then 6, both written in second 11 (one time): the later count holds.
    c, t = cost.advance(c, t, [(at(11), "j", "a", 5), (at(11), "j", "a", 6)],
                        [job("j", "a", 0)], rates, VC, at(20), listed_at=at(10))
    c, t = cost.advance(c, t, [], [job("j", "a", 6)], rates, VC, at(30), listed_at=at(30))
    assert c["stages"][0]["podSeconds"] == pytest.approx(6 * 19)


def test_a_restart_with_a_finished_attempt_and_its_retry_counts_the_retrys_pods() -> None:
    # Before the restart, stage a had attempt 0 (done, 0 Ready) and its retry (50 Ready).
    rates = {"a": 2.5e-5}
    jobs = [job("nightly-a", "a", 0), job("nightly-a-r1", "a", 50)]
    c, _ = cost.advance(None, None, [], jobs, rates, VC, at(-10), listed_at=at(-10))
    c, _ = cost.advance(c, None, [], jobs, rates, VC, at(0), listed_at=at(0))
    base = c["stages"][0]["podSeconds"]
    # Down 60 s; the initial listing brings both Jobs, timed by their last status writes:
    # attempt 0's an hour ago, the retry's at 40 s (Ready 50 throughout).
    samples = [(cost.write_time(at(59.5), _status_write(-3600)), "nightly-a", "a", 0),
               (cost.write_time(at(59.5), _status_write(40)), "nightly-a-r1", "a", 50)]
    c, _ = cost.advance(c, None, samples, jobs, rates, VC, at(60), listed_at=at(59))
    assert c["stages"][0]["podSeconds"] - base == pytest.approx(3000)


def test_a_late_event_the_last_list_already_had_is_dropped() -> None:
    rates = {"a": 2.5e-5}
    # 4 Ready until 8.2 s, 2 until 9.1 s, then 0; the watch delivers each 3 s late.
    c, t = cost.advance(None, None, [], [job("j", "a", 4)], rates, VC, at(0), listed_at=at(0))
    c, t = cost.advance(c, t, [], [job("j", "a", 0)], rates, VC, at(10), listed_at=at(9.5))
    base = c["stages"][0]["podSeconds"]
    c, t = cost.advance(c, t, [(at(9), "j", "a", 2)], [job("j", "a", 0)], rates, VC, at(12.2),
                        listed_at=at(12.0))
    c, t = cost.advance(c, t, [(at(10), "j", "a", 0)], [job("j", "a", 0)], rates, VC, at(20),
                        listed_at=at(19.8))
    assert c["stages"][0]["podSeconds"] - base == pytest.approx(0)


def test_a_job_created_and_ready_between_two_passes_counts_from_its_write() -> None:
    rates = {"a": 2.5e-5}
    c, t = cost.advance(None, None, [], [], rates, VC, at(0), listed_at=at(0))
    c, t = cost.advance(c, t, [], [], rates, VC, at(10), listed_at=at(8))
    # Its Job came after that list, 3 Ready written in second 8 (before 9 s); only the
    # next pass sees it: 3 pods from 9 s, not from 10 s.
    new = {**job("j", "a", 3), "metadata": {**job("j", "a", 3)["metadata"],
                                            **_status_write(8)}}
    c, t = cost.advance(c, t, [], [new], rates, VC, at(20), listed_at=at(19))
    assert c["stages"][0]["podSeconds"] == pytest.approx(3 * 11)
