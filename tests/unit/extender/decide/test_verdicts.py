"""Filter reasons: one bounded string, shared by every node that fails for it."""

from __future__ import annotations

from fabricsched.extender.decide import verdicts


def test_every_node_gets_the_same_bounded_string_object() -> None:
    nodes = [f"gpu-{i:05d}" for i in range(10_000)]
    out = verdicts.every(nodes, "waiting for gang " + "x" * 1_000)
    assert list(out) == nodes
    assert len({id(reason) for reason in out.values()}) == 1
    (reason,) = set(out.values())
    assert len(reason.encode()) <= verdicts.MAX_REASON_BYTES and reason.startswith("waiting for gang x")


def test_a_short_reason_is_kept_whole() -> None:
    assert verdicts.bounded("outside the fabric") == "outside the fabric"
