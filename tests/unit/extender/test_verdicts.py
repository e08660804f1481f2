"""Filter reasons: the grouped answer for 10k nodes is exactly one ``reason`` per node."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fabricsched import ids
from fabricsched.extender import reservations, verdicts
from fabricsched.topology import fabric

TOPOLOGY = ids.TopologyName("ib")
STATES = (fabric.HealthState.HEALTHY, fabric.HealthState.DEGRADED, fabric.HealthState.DOWN)


def two_tier(layout: list[list[int]], health: list[int]) -> fabric.Fabric:
    """Spine ``s<i>`` holds leaves ``l<i>-<j>``, leaf j of spine i holds ``layout[i][j]`` hosts;
    host k's state is ``STATES[health[k % len(health)]]``."""
    hosts: dict[ids.NodeName, fabric.Host] = {}
    domains: dict[fabric.DomainKey, fabric.Domain] = {}
    k = 0
    for i, leaves in enumerate(layout):
        spine = ids.DomainName(f"s{i}")
        spine_hosts: list[ids.NodeName] = []
        leaf_names: list[ids.DomainName] = []
        for j, count in enumerate(leaves):
            leaf = ids.DomainName(f"l{i}-{j}")
            names = [ids.NodeName(f"h{i}-{j}-{n}") for n in range(count)]
            for name in names:
                state = STATES[health[k % len(health)]]
                capacity = {STATES[0]: 1.0, STATES[1]: 0.5, STATES[2]: 0.0}[state]
                hosts[name] = fabric.Host(name, 8, (leaf, spine), capacity, state)
                k += 1
            domains[(0, leaf)] = fabric.Domain(0, leaf, spine, tuple(names), (), 8 * count)
            spine_hosts += names
            leaf_names.append(leaf)
        domains[(1, spine)] = fabric.Domain(1, spine, None, tuple(spine_hosts), tuple(leaf_names),
                                            8 * len(spine_hosts))
    tiers = (fabric.Tier(ids.TierName("leaf"), "leaf-label", 2.0),
             fabric.Tier(ids.TierName("spine"), "spine-label"))
    return fabric.Fabric(tiers, hosts, domains)


@st.composite
def scenarios(draw: Any) -> tuple[Any, ...]:
    layout = draw(st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), min_size=1, max_size=3))
    health = draw(st.lists(st.integers(0, 2), min_size=1, max_size=5))
    fab = two_tier(layout, health)
    names = sorted(fab.hosts)
    ranks = draw(st.lists(st.sampled_from(names), min_size=1, max_size=6))
    used: dict[str, tuple[ids.DomainName, ...]] = {
        "leaf": tuple(sorted({fab.hosts[n].path[0] for n in ranks})),
        "spine": tuple(sorted({fab.hosts[n].path[1] for n in ranks})),
    }
    if draw(st.booleans()):
        used.pop(draw(st.sampled_from(["leaf", "spine"])))  # a plan read back without one tier
    entry = reservations.Entry(
        key=ids.GangKey("train/b@uid"), namespace="train", name="b", job_uid="uid", job_name="b",
        size=len(ranks), gpus_per_pod=8, topology=TOPOLOGY, tier=None, required=False,
        ranks=tuple(ids.NodeName(n) for n in ranks), domains=used,
    )
    rank = draw(st.integers(0, len(ranks) - 1))
    plan = verdicts.Footprint.of(fab, entry, rank, ids.NodeName(ranks[rank]))
    outsiders = [f"cpu-{i}" for i in range(draw(st.integers(0, 3)))]
    candidates = draw(st.lists(st.sampled_from(names + outsiders), unique=True)) if names else []
    reserved = draw(st.dictionaries(st.sampled_from(names + outsiders), st.sampled_from(["train/a", "x/y"])))
    free = {ids.NodeName(n): draw(st.integers(0, 8)) for n in reserved}
    return fab, candidates, plan, free, reserved


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_grouped_answer_is_every_candidates_own_reason(scenario: tuple[Any, ...]) -> None:
    fab, candidates, plan, free, reserved = scenario
    expected = {
        n: verdicts.reason(fab, TOPOLOGY, n, plan, free, 8, reserved) for n in candidates if n != plan.target
    }
    assert verdicts.failed(fab, TOPOLOGY, candidates, plan, free, 8, reserved) == expected


def test_a_reservation_outranks_a_degraded_link_and_outside_the_fabric_outranks_both() -> None:
    fab = two_tier([[2, 2]], [1])  # every host degraded
    entry = reservations.Entry(
        key=ids.GangKey("train/b@uid"), namespace="train", name="b", job_uid="uid", job_name="b", size=2,
        gpus_per_pod=8, topology=TOPOLOGY, tier=None, required=False,
        ranks=(ids.NodeName("h0-0-0"), ids.NodeName("h0-0-1")), domains={"leaf": (ids.DomainName("l0-0"),)},
    )
    plan = verdicts.Footprint.of(fab, entry, 0, ids.NodeName("h0-0-0"))
    reserved = {ids.NodeName("h0-1-0"): "train/a", ids.NodeName("cpu-1"): "train/a"}
    free = {ids.NodeName("h0-1-0"): 0}
    candidates = ["h0-0-0", "h0-0-1", "h0-1-0", "h0-1-1", "cpu-1"]
    got = verdicts.failed(fab, TOPOLOGY, candidates, plan, free, 8, reserved)
    assert got == {
        "h0-0-1": "fabric link of this host is degraded",
        "h0-1-0": "reserved for gang train/a",
        "h0-1-1": "fabric link of this host is degraded",
        "cpu-1": "not part of fabric ib, where gang train/b is planned",
    }
