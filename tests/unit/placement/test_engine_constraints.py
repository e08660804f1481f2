"""Slices and several tiers at once (issue 31): every plan keeps every constraint, and a
brute force over small fabrics finds no gang the engine refused that whole slices could hold."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import FabricBuilder, all_free
from test_engine_properties import fabrics, placements

from fabricsched import ids
from fabricsched.placement import placing, request, snapshot
from fabricsched.topology import fabric


def sliced(pods: int, gpus: int, size: int, slice_tier: int, *, tier: int | None = None,
           required: bool = False, slice_required: bool = True,
           preferred: int | None = None) -> request.GangRequest:
    return request.GangRequest(ids.GangKey("team/sliced"), pods, gpus, tier, required,
                               preferred_tier=preferred, slice_pods=size, slice_tier=slice_tier,
                               slice_required=slice_required)


def slices_whole(fab: fabric.Fabric, ranks: Sequence[ids.NodeName], size: int, tier: int) -> bool:
    return all(len({fab.hosts[n].path[tier] for n in ranks[lo:lo + size]}) == 1
               for lo in range(0, len(ranks), size))


def test_each_slice_lands_in_one_leaf_and_the_whole_in_one_spine() -> None:
    # 4 slices of 4 pods of 8 GPUs: leaves of 5 hosts, two spines; s1's leaves are partly used
    # so that packing alone would split a slice across them.
    fab = (FabricBuilder().spine("s1").leaf("l1", hosts=6).leaf("l2", hosts=6).leaf("l3", hosts=6)
           .leaf("l4", hosts=6).spine("s2").leaf("l5", hosts=6).build())
    free = all_free(fab, {"l1-h0": 8, "l2-h0": 8, "l3-h0": 8, "l3-h1": 8})
    plan = placing.place(snapshot.build(fab), free, sliced(16, 8, 4, 0, tier=1, required=True))
    assert isinstance(plan, request.Plan), plan
    assert slices_whole(fab, plan.ranks, 4, 0)
    assert len({fab.hosts[n].path[1] for n in plan.ranks}) == 1
    assert sorted(plan.slice_domains) == ["l1", "l2", "l3", "l4"]


def test_a_gang_not_a_multiple_of_its_slice_is_refused() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").build()
    nofit = placing.place(snapshot.build(fab), all_free(fab), sliced(6, 8, 4, 0))
    assert isinstance(nofit, request.NoFit) and nofit.unresolvable
    assert "cannot be cut in slices of 4" in nofit.reason
    refused = request.gang_on(fab, ids.GangKey("a/b"), 6, 8, None, False,
                              slices=request.Slices(4, "leaf"))
    assert isinstance(refused, request.NoFit) and "slices of 4" in refused.reason


def test_required_slices_wait_where_only_split_slices_fit() -> None:
    # 3 free hosts in each of two leaves: 6 pods fit, but two slices of 4 do not.
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").build()
    free = all_free(fab, {"l1-h0": 8, "l2-h0": 8})
    nofit = placing.place(snapshot.build(fab), free, sliced(4, 8, 4, 0))
    assert isinstance(nofit, request.NoFit) and not nofit.unresolvable
    assert nofit.reason == "required slices of 4 pods in one leaf: no plan keeps every slice whole now"
    ever = placing.place(snapshot.build(fab), free, sliced(8, 8, 8, 0))
    assert isinstance(ever, request.NoFit) and ever.unresolvable and "could ever" in ever.reason


def test_preferred_slices_are_given_up_and_noted() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").build()
    free = all_free(fab, {"l1-h0": 8, "l2-h0": 8})
    plan = placing.place(snapshot.build(fab), free, sliced(4, 8, 4, 0, slice_required=False))
    assert isinstance(plan, request.Plan) and not plan.slice_domains
    assert plan.reasons[-1] == "preferred slices of 4 pods in one leaf: no plan keeps every slice whole now"


def test_required_spine_with_a_preferred_leaf_notes_the_leaf_it_could_not_have() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").build()
    both = request.GangRequest(ids.GangKey("a/b"), 6, 8, 1, True, preferred_tier=0)
    plan = placing.place(snapshot.build(fab), all_free(fab), both)
    assert isinstance(plan, request.Plan) and plan.tier == 1
    assert "preferred tier leaf: no single leaf holds it now" in plan.reasons
    small = dataclasses.replace(both, pods=3)
    held = placing.place(snapshot.build(fab), all_free(fab), small)
    assert isinstance(held, request.Plan) and held.tier == 0


def test_a_preferred_tier_above_the_required_one_is_refused() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").build()
    refused = request.gang_on(fab, ids.GangKey("a/b"), 2, 8, "leaf", True, preferred="spine")
    assert isinstance(refused, request.NoFit) and refused.unresolvable


@pytest.mark.parametrize("size", [2, 3])
def test_slices_of_a_gang_inside_one_leaf_need_nothing_more(size: int) -> None:
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=6).build()
    plan = placing.place(snapshot.build(fab), all_free(fab), sliced(6, 8, size, 1))
    assert isinstance(plan, request.Plan) and len(plan.slice_domains) == 6 // size


@st.composite
def sliced_cases(draw: st.DrawFn) -> tuple[fabric.Fabric, dict[ids.NodeName, int], request.GangRequest]:
    fab = draw(fabrics())
    free = {n: draw(st.integers(0, h.gpus)) for n, h in sorted(fab.hosts.items())}
    size = draw(st.integers(1, 3))
    pods = size * draw(st.integers(1, 3))
    slice_tier = draw(st.integers(0, len(fab.tiers) - 1))
    tier = draw(st.none() | st.integers(0, len(fab.tiers) - 1))
    required = tier is not None and draw(st.booleans())
    return fab, free, sliced(pods, draw(st.sampled_from([1, 2, 4])), size, slice_tier, tier=tier,
                             required=required)


def _domain_of(fab: fabric.Fabric, ranks: Sequence[ids.NodeName], tier: int) -> int:
    return len({fab.hosts[n].path[tier] for n in ranks})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sliced_cases())
def test_no_plan_splits_a_slice_and_none_is_missed(
    case: tuple[fabric.Fabric, dict[ids.NodeName, int], request.GangRequest],
) -> None:
    fab, free, gang = case
    assert gang.slice_tier is not None
    result = placing.place(snapshot.build(fab), free, gang)
    usable = [p for p in placements(fab, free, gang.gpus_per_pod, gang.pods)
              if not any(fab.hosts[n].down for n in set(p)) or len(set(p)) == 1]
    def ordered(p: Sequence[ids.NodeName]) -> list[ids.NodeName]:
        return sorted(p, key=lambda n: (tuple(reversed(fab.hosts[n].path)), n))
    keeps = [p for p in usable
             if slices_whole(fab, ordered(p), gang.slice_pods, gang.slice_tier)
             and not (gang.required and gang.tier is not None and _domain_of(fab, p, gang.tier) > 1)
             and not any(fab.domains[(t, fab.hosts[n].path[t])].down
                         for n in set(p) for t in range(len(fab.tiers)) if len(set(p)) > 1
                         and _domain_of(fab, p, t) > 1)]
    if isinstance(result, request.Plan):
        assert slices_whole(fab, result.ranks, gang.slice_pods, gang.slice_tier), result
        assert len(result.slice_domains) == (gang.pods // gang.slice_pods if gang.sliced else 0)
        if gang.required and gang.tier is not None:
            assert _domain_of(fab, result.ranks, gang.tier) == 1
    else:
        assert not keeps, (result, keeps[:3])
