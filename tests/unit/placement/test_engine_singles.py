"""Rule 3: single-pod jobs do not use the fabric; gangs that fit one host neither."""

from __future__ import annotations

import pytest
from placement_builders import FabricBuilder, all_free, gang

from fabricsched.placement import placing, request, snapshot

BLIND = request.PlacementOptions(health_aware=False)


def host_of(result: request.Plan | request.NoFit) -> str:
    assert isinstance(result, request.Plan), result
    assert len(set(result.ranks)) == 1
    assert result.tier is None and result.comm_slowdown == 1.0 and not result.degraded_path
    return result.ranks[0]


@pytest.mark.parametrize(
    ("builder", "used", "gpus", "expected"),
    [
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2").degrade_host("l2-h3"), {}, 8, "l2-h3",
                     id="a host whose link is degraded comes first"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2").down_host("l2-h1"), {}, 8, "l2-h1",
                     id="a host whose link is down comes first too"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2"), {"l2-h2": 8}, 8, "l2-h0",
                     id="then a partly used leaf, keeping healthy whole leaves whole"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2"), {"l2-h2": 8, "l1-h3": 4}, 4,
                     "l1-h3",
                     id="then a partly used host, keeping whole hosts whole"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2"),
                     {"l1-h0": 4, "l2-h0": 2, "l2-h1": 8, "l2-h2": 8}, 4, "l2-h0",
                     id="then best fit top down: the tightest leaf before a tighter host elsewhere"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2"), {"l2-h2": 8, "l2-h3": 4}, 4,
                     "l2-h3",
                     id="then the tightest host inside the tightest leaf"),
        pytest.param(FabricBuilder().spine("a").leaf("a1").leaf("a2").spine("b").leaf("b1").leaf("b2"),
                     {"a1-h0": 4, "b1-h0": 8, "b1-h1": 8, "b1-h2": 8, "b2-h0": 2, "b2-h1": 8, "b2-h2": 8},
                     4, "b2-h0",
                     id="then the tightest spine, before a tighter host in a looser spine"),
        pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2").leaf("l3"),
                     {"l2-h2": 4, "l3-h2": 4, "l3-h1": 8}, 4, "l3-h2",
                     id="then the fullest leaf"),
    ],
)
def test_single_pod_prefers(builder: FabricBuilder, used: dict[str, int], gpus: int, expected: str) -> None:
    fab = builder.build()
    assert host_of(placing.place(snapshot.build(fab), all_free(fab, used), gang(1, gpus))) == expected


def test_single_pod_reason_says_why_a_degraded_host() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").degrade_host("l1-h2").build()
    plan = placing.place(snapshot.build(fab), all_free(fab), gang(1))
    assert isinstance(plan, request.Plan)
    assert plan.reasons == (
        "single pod on host l1-h2: its fabric link is degraded, and a single pod does not use it",)


def test_health_blind_single_pod_ignores_degraded_and_avoids_down() -> None:
    fab = (FabricBuilder().spine("s1").leaf("l1", hosts=2).leaf("l2", hosts=2)
           .degrade_host("l2-h0").down_host("l1-h0").build())
    assert host_of(placing.place(snapshot.build(fab), all_free(fab), gang(1), options=BLIND)) == "l1-h1"
    only_down = {"l1-h1": 8, "l2-h0": 8, "l2-h1": 8}
    result = placing.place(snapshot.build(fab), all_free(fab, only_down), gang(1), options=BLIND)
    assert isinstance(result, request.NoFit) and not result.unresolvable


@pytest.mark.parametrize(
    ("used", "expected"),
    [
        pytest.param({}, "l1-h0", id="a multi-pod gang that fits one host takes one host"),
        pytest.param({"l2-h1": 2}, "l2-h1", id="the tightest host that holds it"),
    ],
)
def test_gang_on_one_host_is_best_fit(used: dict[str, int], expected: str) -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").build()
    assert host_of(placing.place(snapshot.build(fab), all_free(fab, used), gang(3, gpus=2))) == expected


def test_gang_on_one_host_may_use_a_degraded_host_and_prefers_it_on_ties() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").degrade_host("l2-h2").build()
    assert host_of(placing.place(snapshot.build(fab), all_free(fab), gang(2, gpus=4))) == "l2-h2"
