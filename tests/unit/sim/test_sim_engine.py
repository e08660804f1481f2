"""The event loop and the capacity model on hand-computed replays (scripted placements).

Fabric of most cases: two leaves under one spine, two hosts of 8 GPUs per leaf, 100 Gbps per
GPU, leaves 2:1 oversubscribed. A leaf's uplinks carry C = 16 x 100 / 2 = 800 Gbps; a gang of
two 8-GPU pods split across the leaves offers D = 1 x 800 x 1 / 1 = 800 Gbps to each leaf.
"""

from __future__ import annotations

import pytest
import yaml
from sim_builders import Scripted, SimFiles

from fabricsched.sim import engine, results

A, B, C, D = "gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004"  # A, B under l00; C, D under l01


def by_name(run: results.Run) -> dict[str, results.Outcome]:
    return {o.job.name: o for o in run.outcomes}


def test_two_gangs_sharing_leaf_uplinks_slow_each_other_down(files: SimFiles) -> None:
    scn = files.fabric().job_rows(
        "a,0,2,8,100,", "b,10,2,8,100,", "c,150,2,8,50,", "d,300,2,8,100,").load()
    run = engine.simulate(scn, Scripted({"a": [A, C], "b": [B, D], "c": [A, C], "d": [A, C]}))
    out = by_name(run)
    # a alone: rho = 800 / 800 = 1. b joins a: (800 + 800) / 800 = 2, fixed for b's whole run.
    assert (out["a"].comm_slowdown, out["a"].end_s) == (1.0, 100.0)
    assert (out["b"].comm_slowdown, out["b"].end_s) == (2.0, 10.0 + 100 * 2.0)
    # a's traffic left at 100; c starts next to b (still running until 210): slowed again.
    assert (out["c"].comm_slowdown, out["c"].end_s) == (2.0, 150.0 + 50 * 2.0)
    # d runs alone once b and c are gone.
    assert (out["d"].comm_slowdown, out["d"].end_s) == (1.0, 400.0)
    assert out["b"].domains_spanned == {"leaf": 2, "spine": 1}
    assert not any(o.degraded_path for o in out.values())


def test_a_gang_inside_one_leaf_puts_nothing_on_the_uplinks(files: SimFiles) -> None:
    scn = files.fabric().job_rows("a,0,2,8,100,", "b,0,2,8,100,").load()
    out = by_name(engine.simulate(scn, Scripted({"a": [A, B], "b": [C, D]})))
    assert out["a"].comm_slowdown == out["b"].comm_slowdown == 1.0
    assert out["a"].domains_spanned == {"leaf": 1, "spine": 1}


def test_degraded_uplinks_and_hosts_slow_the_gangs_that_cross_them(files: SimFiles) -> None:
    scn = (files.fabric()
           .job_rows("a,10,2,8,100,", "b,10,2,8,100,")
           .event_rows("0,domain,leaf/l01,degraded,0.5", "0,node,gpu-0002,degraded,0.25")
           .load())
    out = by_name(engine.simulate(scn, Scripted({"a": [A, C], "b": [B, D]})))
    # a: l01 uplinks at half capacity, C = 400: rho = 800 / 400 = 2.
    assert out["a"].comm_slowdown == 2.0
    assert out["a"].degraded_path
    # b: l01 now carries a and b: 1600 / 400 = 4; its host B at 0.25 gives 1 / 0.25 = 4 too.
    assert out["b"].comm_slowdown == 4.0


def test_a_recovery_counts_only_after_the_hysteresis(files: SimFiles) -> None:
    scn = (files.fabric(recover_after=300)
           .job_rows("early,200,2,8,1,", "almost,399,2,8,1,", "after,400,2,8,1,")
           .event_rows("0,domain,leaf/l01,degraded,0.5", "100,domain,leaf/l01,healthy,")
           .load())
    table = {name: [A, C] for name in ("early", "almost", "after")}
    out = by_name(engine.simulate(scn, Scripted(table)))
    assert out["early"].comm_slowdown == 2.0
    assert out["almost"].comm_slowdown == 2.0
    assert out["after"].comm_slowdown == 1.0
    assert not out["after"].degraded_path


def test_a_job_that_does_not_fit_waits_for_an_end_then_starts(files: SimFiles) -> None:
    scn = files.fabric().job_rows("big,0,4,8,100,", "next,5,1,8,10,").load()
    table = {"big": [A, B, C, D], "next": [A]}
    out = by_name(engine.simulate(scn, Scripted(table)))
    # big: two pods per leaf of four, D = 2 x 800 x 2 / 3 per leaf, rho = 4/3: it ends at 400/3.
    assert out["big"].comm_slowdown == pytest.approx(4 / 3)
    assert out["next"].start_s == pytest.approx(400 / 3)  # the end frees A, then the queue is tried


def test_equal_timestamps_run_ends_before_submissions(files: SimFiles) -> None:
    scn = files.fabric().job_rows("first,0,1,8,50,", "second,50,1,8,10,").load()
    out = by_name(engine.simulate(scn, Scripted({"first": [A], "second": [A]})))
    assert out["second"].start_s == 50.0


def test_greedy_backfill_lets_a_small_job_pass_a_blocked_big_one(files: SimFiles) -> None:
    scn = files.fabric().job_rows("hold,0,1,8,100,", "big,1,4,8,10,", "small,2,1,8,10,").load()
    table = {"hold": [A], "big": [A, B, C, D], "small": [B]}
    out = by_name(engine.simulate(scn, Scripted(table)))
    assert out["small"].start_s == 2.0
    assert out["big"].start_s == 100.0  # once hold ends (small ended at 12)


def test_summary_figures_follow_the_outcomes(files: SimFiles) -> None:
    scn = files.fabric().job_rows("a,0,2,8,100,", "b,10,2,8,100,", "solo,0,1,8,100,").load()
    run = engine.simulate(scn, Scripted({"a": [A, C], "b": [B, D], "solo": [A]}))
    s = results.summarize(run)
    # a starts at 0 on A and C (alone: 1.0, ends 100); solo needs A, waits until 100;
    # b starts at 10 next to a: 2.0, ends 210.
    assert s["jobs_started"] == 3
    assert s["wait_mean_s"] == pytest.approx((0 + 0 + 100) / 3)
    assert s["makespan_s"] == 210.0
    busy = 16 * 100 + 16 * 200 + 8 * 100
    assert s["gpu_utilisation"] == pytest.approx(busy / (32 * 210))
    assert s["gpu_useful_utilisation"] == pytest.approx((16 * 100 + 16 * 100 + 8 * 100) / (32 * 210))
    assert s["gangs"] == 2
    assert s["slowdown_mean"] == 1.5
    assert s["slowdown_over_floor_mean"] == 1.5  # both gangs fit one leaf alone: floor 1
    assert s["gangs_one_leaf_pct"] == 0.0
    assert s["down_element_uses"] == 0


def test_spec_links_and_node_conditions_hold_from_the_start(files: SimFiles) -> None:
    files.fabric().job_rows("a,0,2,8,100,", "b,500,2,8,100,")
    topology = yaml.safe_load(files.topology.read_text())
    topology["spec"]["links"] = [{"tier": "leaf", "domain": "l01", "state": "degraded", "capacity": 0.25}]
    files.topology.write_text(yaml.safe_dump(topology))
    nodes = yaml.safe_load(files.nodes.read_text())
    nodes["items"][1]["status"]["conditions"].append(
        {"type": "FabricLinkDegraded", "status": "True", "message": "symbol errors on mlx5_2"})
    files.nodes.write_text(yaml.safe_dump(nodes))
    out = by_name(engine.simulate(files.load(), Scripted({"a": [A, C], "b": [A, B]})))
    assert out["a"].comm_slowdown == 4.0  # l01 uplinks at 0.25: 800 / 200
    # b stays inside l00 (no uplinks) but uses B, degraded at the default capacity 0.5: 1 / 0.5.
    assert out["b"].comm_slowdown == 2.0
    assert out["a"].degraded_path and out["b"].degraded_path
