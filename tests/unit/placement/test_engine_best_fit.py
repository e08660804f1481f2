"""Best fit at every tier, top down (docs/design.md rule 2): the tightest top-tier domain, then
the tightest domain inside it, down to the host; the issue's two cases from Kueue's TAS tests."""

from __future__ import annotations

from placement_builders import FabricBuilder, all_free, gang

from fabricsched.placement import placing, request, snapshot

BLOCKS = [("rack", 1.0), ("block", 1.0)]


def test_one_pod_in_one_block_takes_the_tighter_block_and_its_tightest_rack() -> None:
    # Block a: 4 free GPUs on one host; block b: 3 free, one rack of b holding 1.
    fab = (FabricBuilder(tiers=BLOCKS).at("block", "a").at("rack", "a1").host("a1-h0", 4)
           .at("block", "b").at("rack", "b1").host("b1-h0", 2).at("rack", "b2").host("b2-h0", 2).build())
    free = all_free(fab, {"b2-h0": 1})
    plan = placing.place(snapshot.build(fab), free, gang(1, 1, tier=1, required=True))
    assert isinstance(plan, request.Plan) and plan.ranks == ("b2-h0",)


def test_gang_on_one_host_takes_the_host_in_the_tighter_block() -> None:
    # Two hosts with 8 free in blocks a and b; block a has more room left elsewhere.
    fab = (FabricBuilder(tiers=BLOCKS).at("block", "a").at("rack", "a1").host("a1-h0").host("a1-h1")
           .at("block", "b").at("rack", "b1").host("b1-h0").host("b1-h1").build())
    free = all_free(fab, {"b1-h1": 8})
    plan = placing.place(snapshot.build(fab), free, gang(8, 1, tier=1, required=True))
    assert isinstance(plan, request.Plan) and plan.ranks == ("b1-h0",) * 8


def test_leaf_holder_in_the_tightest_spine_wins_over_a_tighter_leaf_elsewhere() -> None:
    # 2 pods of 8: leaf l1 (spine s1, which has much room) has exactly 2 hosts free; spine s2
    # has one leaf with 3 free hosts and nothing else: s2 is the tighter spine.
    fab = (FabricBuilder().spine("s1").leaf("l1", hosts=2).leaf("l2").leaf("l3")
           .spine("s2").leaf("l4", hosts=3).build())
    plan = placing.place(snapshot.build(fab), all_free(fab), gang(2))
    assert isinstance(plan, request.Plan)
    assert {fab.hosts[n].path[0] for n in plan.ranks} == {"l4"}


def test_equal_fit_breaks_fewer_whole_domains() -> None:
    # l1 and l2 leave the same room; l2 is already partly used, so l1 stays whole.
    fab = FabricBuilder().spine("s1").leaf("l1", hosts=3).leaf("l2", hosts=4).build()
    free = all_free(fab, {"l2-h3": 8})
    plan = placing.place(snapshot.build(fab), free, gang(2))
    assert isinstance(plan, request.Plan)
    assert {fab.hosts[n].path[0] for n in plan.ranks} == {"l2"}
