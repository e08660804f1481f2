"""Properties of the engine on random small fabrics, free maps and requests (hypothesis).

On fabrics small enough, a brute force enumerates every way to put the gang's pods on hosts
with room: the engine must find a plan whenever one exists, a healthy one whenever a healthy
one exists (rule 1), and, among healthy plans, one at the lowest tier (rule 2).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from fabric_strategies import fabrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import gang, per_host

from fabricsched import ids
from fabricsched.placement import capacity, patience, placing, request, snapshot
from fabricsched.topology import fabric


@st.composite
def cases(draw: st.DrawFn) -> tuple[fabric.Fabric, dict[ids.NodeName, int], request.GangRequest]:
    fab = draw(fabrics())
    free = {n: draw(st.integers(0, h.gpus)) for n, h in sorted(fab.hosts.items())}
    tier = draw(st.none() | st.integers(0, len(fab.tiers) - 1))
    required = tier is not None and draw(st.booleans())
    return fab, free, gang(draw(st.integers(1, 5)), draw(st.sampled_from([1, 2, 4])), tier, required)


def level(fab: fabric.Fabric, ranks: Sequence[ids.NodeName]) -> int:
    """-1 on one host, else the lowest tier whose one domain holds every rank (tiers = the fabric)."""
    if len(set(ranks)) == 1:
        return -1
    for tier in range(len(fab.tiers)):
        if len({fab.hosts[n].path[tier] for n in ranks}) == 1:
            return tier
    return len(fab.tiers)


def placements(
    fab: fabric.Fabric, free: dict[ids.NodeName, int], g: int, pods: int
) -> Iterator[tuple[ids.NodeName, ...]]:
    """Every multiset of hosts with room for ``pods`` pods of ``g`` GPUs."""
    hosts = sorted(n for n in fab.hosts if free[n] >= g)

    def walk(i: int, left: int) -> Iterator[tuple[ids.NodeName, ...]]:
        if left == 0:
            yield ()
            return
        if i == len(hosts):
            return
        for take in range(min(left, free[hosts[i]] // g), -1, -1):
            for rest in walk(i + 1, left - take):
                yield (hosts[i],) * take + rest

    yield from walk(0, pods)


def valid(fab: fabric.Fabric, gang_: request.GangRequest, ranks: Sequence[ids.NodeName]) -> bool:
    """Within the required tier, and no down element on the path (a one-host gang has no path)."""
    if gang_.required and gang_.tier is not None and len({fab.hosts[n].path[gang_.tier] for n in ranks}) > 1:
        return False
    return len(set(ranks)) == 1 or not math.isinf(capacity.comm_slowdown(fab, ranks, gang_.gpus_per_pod))


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_plans_are_sound(case: tuple[fabric.Fabric, dict[ids.NodeName, int], request.GangRequest]) -> None:
    fab, free, gang_ = case
    for options in (request.PlacementOptions(), request.PlacementOptions(health_aware=False)):
        result = placing.place(snapshot.build(fab), free, gang_, options=options)
        if isinstance(result, request.NoFit):
            continue
        assert len(result.ranks) == gang_.pods, "every pod placed exactly once"
        for name, pods in per_host(result.ranks).items():
            assert pods * gang_.gpus_per_pod <= free[ids.NodeName(name)], "never over-allocates"
        assert valid(fab, gang_, result.ranks), "required tier honoured, no down element"
        assert result.comm_slowdown == capacity.comm_slowdown(fab, result.ranks, gang_.gpus_per_pod)
        assert result.degraded_path == capacity.on_degraded_path(fab, result.ranks)
        reordered = dict(reversed(list(free.items())))
        again = placing.place(snapshot.build(fab), reordered, gang_, options=options)
        assert again == result, "same input, same plan"


@SETTINGS
@given(cases())
def test_ranks_follow_the_fabric(
    case: tuple[fabric.Fabric, dict[ids.NodeName, int], request.GangRequest],
) -> None:
    fab, free, gang_ = case
    result = placing.place(snapshot.build(fab), free, gang_)
    if isinstance(result, request.Plan):
        for depth in range(-1, len(fab.tiers)):
            keys = [n if depth < 0 else fab.hosts[n].path[depth] for n in result.ranks]
            runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
            assert len(runs) == len(set(runs)), f"ranks interleave at depth {depth}: {keys}"


@SETTINGS
@given(cases())
def test_brute_force_agrees(case: tuple[fabric.Fabric, dict[ids.NodeName, int], request.GangRequest]) -> None:
    fab, free, gang_ = case
    result = placing.place(snapshot.build(fab), free, gang_)
    possible = [p for p in placements(fab, free, gang_.gpus_per_pod, gang_.pods) if valid(fab, gang_, p)]
    if not possible:
        assert isinstance(result, request.NoFit)
        return
    assert isinstance(result, request.Plan), f"brute force found {possible[0]}, engine said {result}"
    healthy = [p for p in possible if not capacity.on_degraded_path(fab, p)]
    if healthy:
        assert not result.degraded_path, f"healthy {healthy[0]} exists, engine chose {result}"
        assert level(fab, result.ranks) == min(level(fab, p) for p in healthy), "lowest tier first"
    else:
        best = min(capacity.comm_slowdown(fab, p, gang_.gpus_per_pod) for p in possible)
        assert result.comm_slowdown < math.inf
        assert any(r.startswith("no healthy placement") for r in result.reasons) or best == 1.0


@SETTINGS
@given(cases())
def test_unresolvable_means_not_even_the_empty_healthy_fabric(
    case: tuple[fabric.Fabric, dict[ids.NodeName, int], request.GangRequest],
) -> None:
    fab, free, gang_ = case
    result = placing.place(snapshot.build(fab), free, gang_)
    if isinstance(result, request.NoFit) and result.unresolvable:
        empty = {n: h.gpus for n, h in fab.hosts.items()}
        healthy_fab = patience.healthy(fab)
        assert not any(valid(healthy_fab, gang_, p)
                       for p in placements(healthy_fab, empty, gang_.gpus_per_pod, gang_.pods))
