"""Ranks planned again (their node cordoned or deleted) follow the gang rule, not the single-pod one."""

from __future__ import annotations

import math

from extender_harness import Harness, fabric_nodes

from builders import make_node, make_pod
from fabricsched.api import topology as api


def _busy(h: Harness, node: str) -> None:
    h.state.apply_pod(make_pod(f"other-{node}", "other").gpus(8).on(node).build())


def test_a_moving_rank_stays_in_its_spine_off_a_down_host() -> None:
    # l3-h0 under the other spine is down: the single-pod rule would pick it first (a lone pod
    # does not use its link), but rank 3 of a 4-pod gang talks to the other three.
    nodes = fabric_nodes()
    for body in nodes:
        if body["metadata"]["name"] == "l3-h0":
            body["metadata"]["labels"][api.HEALTH_LABEL] = "down"
    h = Harness(nodes)
    h.restore()
    uid = h.job("a", 4)
    placed = [h.place(h.pod("a", uid, r)) for r in range(3)]
    planned = h.book.entries()[0].ranks
    lost = planned[3]
    assert lost is not None and {n.split("-")[0] for n in placed} == {lost.split("-")[0]}
    # Everything else is busy but one healthy host in the same spine and the down host.
    spine_mate = "l2-h0" if lost.startswith("l1") else "l1-h0"
    for name in h.state.nodes:
        if name not in {*placed, lost, spine_mate, "l3-h0"}:
            _busy(h, name)
    # The gang's fourth node is cordoned: the scheduler no longer passes it.
    h.state.apply_node(make_node(lost).leaf(lost.split("-")[0]).spine("s1").gpus(8)
                       .label("unschedulable", "yes").build())
    answer = h.filter(h.pod("a", uid, 3), [spine_mate, "l3-h0"])
    assert answer.passed == [spine_mate]
    [entry] = h.book.entries()
    assert entry.ranks[3] == spine_mate
    assert math.isfinite(entry.comm_slowdown)
    h.run(h.writer.flush(1.0))
    status = h.store.get("train", "a")["status"]
    assert math.isfinite(status["commSlowdown"])


def test_a_moving_rank_with_only_a_down_host_left_is_not_placed_there() -> None:
    nodes = fabric_nodes()
    for body in nodes:
        if body["metadata"]["name"] == "l3-h0":
            body["metadata"]["labels"][api.HEALTH_LABEL] = "down"
    h = Harness(nodes)
    h.restore()
    uid = h.job("a", 4)
    placed = [h.place(h.pod("a", uid, r)) for r in range(3)]
    lost = h.book.entries()[0].ranks[3]
    assert lost is not None
    for name in h.state.nodes:
        if name not in {*placed, lost, "l3-h0"}:
            _busy(h, name)
    answer = h.filter(h.pod("a", uid, 3), ["l3-h0"])
    assert answer.passed == []
    [entry] = h.book.entries()
    assert entry.ranks[3] != "l3-h0" and math.isfinite(entry.comm_slowdown)
