"""The policies inside the simulator: what each promises, checked on replays of whole runs."""

from __future__ import annotations

from collections import defaultdict

import pytest
from sim_builders import SimFiles

from fabricsched import ids
from fabricsched.placement import request
from fabricsched.sim import engine, policies, results, scenario, traces

MIX = "1x1:6,1x4:4,1x8:8,2x8:8,2x4:4,4x8:8,4x8@leaf:4,8x8:4,6x4@leaf:2,16x8:2"


@pytest.fixture
def busy(files: SimFiles) -> scenario.Scenario:
    """32 hosts (8 leaves of 4 under 2 spines), a loaded trace, degraded leaves and hosts, a down host."""
    files.fabric("spine:2,leaf:4:2.0", hosts_per_leaf=4)
    jobs = traces.generate(traces.TraceOptions(160, 256, 0.9, seed=7, mix=traces.parse_mix(MIX),
                                               duration=traces.parse_duration("exp:mean=600")))
    files.jobs.write_text(traces.to_csv(jobs))
    files.event_rows(
        "0,domain,leaf/l01,degraded,0.25",
        "0,node,gpu-0017,down,",
        "500,node,gpu-0009,degraded,0.5",
        "2000,domain,spine/s01,degraded,",
        "4000,domain,leaf/l01,healthy,",
        "6000,node,gpu-0017,healthy,",
    )
    return files.load()


@pytest.mark.parametrize("name", policies.POLICY_NAMES)
def test_no_host_ever_holds_more_gpus_than_it_has(busy: scenario.Scenario, name: str) -> None:
    run = engine.simulate(busy, policies.make(name, seed=1))
    steps: list[tuple[float, int, ids.NodeName, int]] = []
    for o in run.outcomes:
        if o.start_s is None or o.end_s is None:
            continue
        for node in o.placement:
            steps += [(o.start_s, 1, node, o.job.gpus_per_pod), (o.end_s, 0, node, -o.job.gpus_per_pod)]
    used: dict[ids.NodeName, int] = defaultdict(int)
    for _, _, node, delta in sorted(steps):  # ends (0) before starts (1) at one time
        used[node] += delta
        assert used[node] <= busy.structure.hosts[node].gpus
    assert sum(o.started for o in run.outcomes) == len(run.outcomes)
    for o in run.outcomes:
        assert o.end_s == pytest.approx(o.start_s + o.job.duration_s * o.comm_slowdown)  # type: ignore[operator]


@pytest.mark.parametrize("name", policies.POLICY_NAMES)
def test_no_policy_ever_uses_a_down_element(busy: scenario.Scenario, name: str) -> None:
    run = engine.simulate(busy, policies.make(name, seed=1))
    assert results.summarize(run)["down_element_uses"] == 0
    for o in run.outcomes:
        if o.start_s is not None and o.start_s < 6000 and len(set(o.placement)) > 1:
            assert "gpu-0017" not in o.placement


@pytest.mark.parametrize("name", ["fabric", "tas-bestfit"])
def test_required_tiers_are_honoured(busy: scenario.Scenario, name: str) -> None:
    run = engine.simulate(busy, policies.make(name, seed=1))
    required = [o for o in run.outcomes if o.job.required_tier == "leaf"]
    assert required
    assert all(o.domains_spanned["leaf"] == 1 for o in required)


def test_the_fabric_policy_never_takes_an_avoidable_degraded_path(busy: scenario.Scenario) -> None:
    fabric_run = results.summarize(engine.simulate(busy, policies.make("fabric", seed=1)))
    blind_run = results.summarize(engine.simulate(busy, policies.make("tas-bestfit", seed=1)))
    assert fabric_run["gangs_degraded_avoidable"] == 0
    assert blind_run["gangs_degraded_avoidable"] > 0  # the check can find them


@pytest.mark.parametrize("name", policies.POLICY_NAMES)
def test_the_same_seed_gives_the_same_result(busy: scenario.Scenario, name: str) -> None:
    first = results.document(engine.simulate(busy, policies.make(name, seed=3)))
    again = results.document(engine.simulate(busy, policies.make(name, seed=3)))
    assert first == again


@pytest.mark.parametrize("name", ["default", "random"])
def test_another_seed_breaks_ties_differently(busy: scenario.Scenario, name: str) -> None:
    first = results.document(engine.simulate(busy, policies.make(name, seed=3)))
    other = results.document(engine.simulate(busy, policies.make(name, seed=4)))
    assert [j["placement"] for j in first["jobs"]] != [j["placement"] for j in other["jobs"]]


def _placements(scn: scenario.Scenario, name: str) -> dict[str, tuple[str, ...]]:
    return {o.job.name: o.placement for o in engine.simulate(scn, policies.make(name, seed=5)).outcomes}


def test_a_gang_avoids_a_degraded_leaf_and_returns_after_recovery_and_hysteresis(files: SimFiles) -> None:
    # Three leaves of two 8-GPU hosts: a gang of three such pods must span two leaves.
    files.fabric("spine:1,leaf:3:2.0", hosts_per_leaf=2, recover_after=300)
    files.job_rows("before,10,3,8,10,", "waiting,200,3,8,10,", "after,450,3,8,10,")
    baseline = _placements(files.load(), "fabric")
    leaf = {"gpu-0001": "l00", "gpu-0002": "l00", "gpu-0003": "l01", "gpu-0004": "l01",
            "gpu-0005": "l02", "gpu-0006": "l02"}
    used = sorted({leaf[n] for n in baseline["before"]})
    assert baseline["before"] == baseline["after"]
    target = used[0]
    files.event_rows(f"0,domain,leaf/{target},degraded,0.5", f"100,domain,leaf/{target},healthy,")
    placed = _placements(files.load(), "fabric")
    # Degraded from 0, reported healthy at 100: still held degraded until 100 + 300 = 400.
    assert target not in {leaf[n] for n in placed["before"]}
    assert target not in {leaf[n] for n in placed["waiting"]}
    assert placed["after"] == baseline["after"]


def test_default_spreads_one_pod_per_host_by_least_allocated(files: SimFiles) -> None:
    files.fabric("spine:1,leaf:2:2.0", hosts_per_leaf=4).job_rows("half,0,1,4,100,", "gang,1,4,4,100,")
    placed = _placements(files.load(), "default")
    # Four pods on the seven empty hosts (score 50), never next to "half" (score 0), one each.
    assert len(set(placed["gang"])) == 4
    assert placed["half"][0] not in placed["gang"]
    packed = _placements(files.load(), "fabric")
    assert len(set(packed["gang"])) == 2


def test_default_ignores_degraded_health_but_not_down(files: SimFiles) -> None:
    # One gang at a time (each ends before the next arrives, even at 10x), so the random tie
    # breaks see the same free hosts with or without health events.
    files.fabric("spine:1,leaf:2:2.0", hosts_per_leaf=4)
    files.job_rows(*(f"j{i},{100 * i},2,8,9," for i in range(12)), "all,2000,8,8,10,")
    healthy = _placements(files.load(), "default")
    files.event_rows("0,domain,leaf/l00,degraded,0.1", "0,node,gpu-0005,degraded,0.1")
    degraded = _placements(files.load(), "default")
    assert degraded == healthy
    assert any("gpu-0005" in p for p in degraded.values())
    files.event_rows("0,node,gpu-0005,down,")
    down = _placements(files.load(), "default")
    assert all("gpu-0005" not in p for p in down.values())
    assert down["all"] == ()  # eight hosts needed, seven usable: it waits


def test_the_default_is_top_down_and_the_simulators_engine_policies_take_the_setting() -> None:
    assert request.PlacementOptions().fit_order is request.FitOrder.TOP_DOWN
    for name in ("fabric", "tas-bestfit"):
        policy = policies.make(name, 0, fit_order=request.FitOrder.HOLDING)
        assert isinstance(policy, policies.EnginePolicy)
        assert policy.options.fit_order is request.FitOrder.HOLDING
    default = policies.make("fabric", 0)
    assert isinstance(default, policies.EnginePolicy)
    assert default.options.fit_order is request.FitOrder.TOP_DOWN
