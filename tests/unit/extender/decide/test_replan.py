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


def _relabel(h: Harness, name: str, state: str) -> None:
    leaf = name.split("-")[0]
    spine = "s1" if leaf in ("l1", "l2") else "s2"
    h.state.apply_node(make_node(name).leaf(leaf).spine(spine).gpus(8).label(api.HEALTH_LABEL, state).build())


def test_a_reserved_rank_whose_host_degrades_later_moves_to_a_healthy_host_of_its_gang() -> None:
    h = Harness(fabric_nodes())
    h.restore()
    uid = h.job("a", 3)
    placed = [h.place(h.pod("a", uid, r)) for r in range(2)]
    reserved = h.book.entries()[0].ranks[2]
    assert reserved is not None
    _relabel(h, reserved, "degraded")
    answer = h.filter(h.pod("a", uid, 2))
    assert len(answer.passed) == 1 and answer.passed[0] != reserved
    moved = answer.passed[0]
    assert moved.split("-")[0] == placed[0].split("-")[0]  # still in the gang's leaf
    assert h.book.entries()[0].ranks[2] == moved and not h.book.entries()[0].degraded_path


def test_a_reserved_rank_stays_on_a_degraded_host_when_nothing_healthier_is_free() -> None:
    h = Harness(fabric_nodes())
    h.restore()
    uid = h.job("a", 3)
    placed = [h.place(h.pod("a", uid, r)) for r in range(2)]
    reserved = h.book.entries()[0].ranks[2]
    assert reserved is not None
    for name in h.state.nodes:
        if name not in {*placed, reserved}:
            _busy(h, name)
    _relabel(h, reserved, "degraded")
    assert h.filter(h.pod("a", uid, 2)).passed == [reserved]


def test_a_reserved_rank_whose_host_goes_down_leaves_it() -> None:
    h = Harness(fabric_nodes())
    h.restore()
    uid = h.job("a", 2)
    h.place(h.pod("a", uid, 0))
    reserved = h.book.entries()[0].ranks[1]
    assert reserved is not None
    _relabel(h, reserved, "down")
    answer = h.filter(h.pod("a", uid, 1))
    assert len(answer.passed) == 1 and answer.passed[0] != reserved
