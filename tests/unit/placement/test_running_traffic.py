"""The running traffic as the extender rebuilds it from its book on every plan (``Running.summed``):
the last sum is carried on, and gives the very floats a sum from zero gives.

Fabric ``two_spines``: s1 (l1, l2), s2 (l3, l4), 4 hosts x 8 GPUs per leaf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement_builders import FabricBuilder

from fabricsched import ids
from fabricsched.placement import capacity, session
from fabricsched.topology import fabric


@dataclass(frozen=True)
class Gang:
    """A placed gang's record: immutable, one object per placement (as a book entry)."""

    key: str
    nodes: tuple[ids.NodeName, ...]


def gang(key: str, *spec: tuple[str, int]) -> Gang:
    """("l1", 2) -> two ranks, on l1-h0 and l1-h1."""
    return Gang(key, tuple(ids.NodeName(f"{leaf}-h{i}") for leaf, n in spec for i in range(n)))


GANGS = (
    gang("a", ("l1", 3), ("l2", 1)),
    gang("b", ("l1", 1), ("l3", 2)),
    gang("c", ("l2", 2), ("l4", 3)),
    gang("d", ("l3", 1), ("l4", 1)),
)


def from_zero(fab: fabric.Fabric, gangs: Sequence[Gang]) -> capacity.Traffic:
    total = capacity.Traffic()
    for g in gangs:
        total.add_demand(capacity.gang_demand(fab, g.nodes, 8))
    return total


class Asked:
    """The demand function, recording which gangs it was asked for."""

    def __init__(self, fab: fabric.Fabric) -> None:
        self.fab = fab
        self.keys: list[str] = []

    def __call__(self, g: Gang) -> Mapping[fabric.DomainKey, float]:
        self.keys.append(g.key)
        return capacity.gang_demand(self.fab, g.nodes, 8)


def test_a_call_with_more_gangs_adds_only_theirs_and_gets_the_floats_of_a_sum_from_zero(
    two_spines: fabric.Fabric,
) -> None:
    running, asked = session.Running(), Asked(two_spines)
    first = running.summed(two_spines, GANGS[:2], asked)
    assert asked.keys == ["a", "b"]
    asked.keys.clear()
    second = running.summed(two_spines, GANGS, asked)
    assert asked.keys == ["c", "d"]
    expected = from_zero(two_spines, GANGS)
    assert second.load == expected.load  # exactly: the same additions in the same order
    assert list(second.load) == list(expected.load)
    assert first.load == from_zero(two_spines, GANGS[:2]).load  # an earlier answer is not moved


def test_a_changed_gang_fewer_gangs_or_another_fabric_sum_again_from_zero(two_spines: fabric.Fabric) -> None:
    running, asked = session.Running(), Asked(two_spines)
    running.summed(two_spines, GANGS, asked)
    moved = (GANGS[0], gang("b", ("l1", 2), ("l3", 2)), *GANGS[2:])  # b planned again: a new record
    asked.keys.clear()
    assert running.summed(two_spines, moved, asked).load == from_zero(two_spines, moved).load
    assert asked.keys == ["a", "b", "c", "d"]
    asked.keys.clear()
    assert running.summed(two_spines, moved[1:], asked).load == from_zero(two_spines, moved[1:]).load
    assert asked.keys == ["b", "c", "d"]
    other = session.Running()
    other.summed(two_spines, GANGS[:2], asked)
    same_shape = FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").leaf("l4").build()
    asked.keys.clear()
    assert other.summed(same_shape, GANGS, asked).load == from_zero(two_spines, GANGS).load
    assert asked.keys == ["a", "b", "c", "d"]


def test_an_empty_book_has_no_traffic(two_spines: fabric.Fabric) -> None:
    assert not session.Running().summed(two_spines, [], Asked(two_spines))
