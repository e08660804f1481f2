"""``slots.tightest`` walks down from the tightest domains; it must pick what the plain rule
picks: the least leaf by (the rooms above it, top tier first; then its own order)."""

from __future__ import annotations

from fabric_strategies import fabrics
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import FabricBuilder

from fabricsched.placement import slots, tree
from fabricsched.topology import fabric


def plain_rule(index: tree.Tree, rooms: dict[fabric.DomainKey, int], held: set[fabric.DomainKey]
               ) -> fabric.DomainKey | None:
    leaves = [leaf for leaf in index.leaves if leaf in held]
    return min(leaves, key=lambda leaf: (slots.ancestors(index, rooms, leaf), rooms[leaf], leaf[1]),
               default=None)


@settings(max_examples=300, deadline=None)
@given(fab=fabrics(), data=st.data())
def test_the_walk_down_picks_the_leaf_the_plain_rule_picks(fab: fabric.Fabric, data: st.DataObject) -> None:
    index = tree.build(fab)
    # Few distinct values, so ties between domains (kept all the way down) are common.
    per_leaf = {leaf: data.draw(st.integers(0, 3)) for leaf in index.leaves}
    rooms = slots.up_the_tree(index, per_leaf)
    held = {leaf for leaf in index.leaves if data.draw(st.booleans())}
    asked: list[fabric.DomainKey] = []

    def holds(leaf: fabric.DomainKey) -> bool:
        asked.append(leaf)
        return leaf in held

    found = slots.tightest(index, rooms, holds, lambda leaf: (rooms[leaf], leaf[1]))
    assert found == plain_rule(index, rooms, held)
    assert len(asked) == len(set(asked)), "a leaf is asked once"


def test_only_the_leaves_under_the_tightest_domain_are_asked() -> None:
    fab = (FabricBuilder().spine("a").leaf("a1").leaf("a2").spine("b").leaf("b1").leaf("b2")
           .spine("c").leaf("c1").build())
    index = tree.build(fab)
    rooms = slots.up_the_tree(index, {(0, "a1"): 4, (0, "a2"): 4, (0, "b1"): 1, (0, "b2"): 2, (0, "c1"): 9})
    asked: list[str] = []

    def holds(leaf: fabric.DomainKey) -> bool:
        asked.append(leaf[1])
        return leaf[1] != "b1"

    assert slots.tightest(index, rooms, holds, lambda leaf: (rooms[leaf], leaf[1])) == (0, "b2")
    assert sorted(asked) == ["b1", "b2"]
