"""The victim search's shortcuts choose what the full search chooses (hypothesis).

``victims.search`` orders the domains by a lower bound of their cost and stops at the first
whose bound exceeds the cheapest found, and makes the final plan of the tied domains in order
of room left and name until one reaches the floor of comm_slowdown on a healthy path.
``exhaustive=True`` searches every domain and plans every tied one: the reference. On random
fabrics (health included), random work (start times that often tie), with and without the
running gangs' traffic, both give the same ``Choice``.
"""

from __future__ import annotations

import pytest
from fabric_strategies import fabrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import all_free

from fabricsched import ids
from fabricsched.placement import bounds, capacity, placing, preemption, request, snapshot, victims, workloads
from fabricsched.topology import fabric

Case = tuple[fabric.Fabric, list[preemption.RunningWorkload], request.GangRequest, bool]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    fab = draw(fabrics())
    running: list[preemption.RunningWorkload] = []
    left = {n: h.gpus for n, h in sorted(fab.hosts.items())}
    starts = st.sampled_from([0.0, 10.0, 50.0, 90.0])  # few values: ties on progress are common
    for i in range(draw(st.integers(0, 10))):
        g = draw(st.sampled_from([1, 2, 4]))
        hosts = [n for n, free in left.items() if free >= g]
        if not hosts:
            break
        pods: list[tuple[ids.NodeName, int]] = []
        for name in draw(st.lists(st.sampled_from(hosts), min_size=1, max_size=4)):
            if left[name] >= g:
                left[name] -= g
                pods.append((name, g))
        running.append(preemption.RunningWorkload(
            ids.GangKey(f"w{i}"), draw(st.sampled_from([0, 10, 100])), tuple(pods), started_s=draw(starts),
            gang=len(pods) > 1, pattern=draw(st.sampled_from([capacity.ALL_TO_ALL, capacity.RING]))))
    for name, free in left.items():
        if free and draw(st.integers(0, 3)):
            running.append(preemption.RunningWorkload(
                ids.GangKey(f"fill-{name}"), draw(st.sampled_from([0, 10])), ((name, free),),
                started_s=draw(starts), gang=False))
    tier = draw(st.none() | st.integers(0, len(fab.tiers) - 1))
    want = request.GangRequest(ids.GangKey("hi"), draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4])),
                               tier, tier is not None and draw(st.booleans()))
    return fab, running, want, draw(st.booleans())


def used_free(fab: fabric.Fabric, running: list[preemption.RunningWorkload]) -> dict[ids.NodeName, int]:
    used: dict[str, int] = {}
    for w in running:
        for host, g in w.pods:
            used[host] = used.get(host, 0) + g
    return all_free(fab, used)


def traffic_of(fab: fabric.Fabric, running: list[preemption.RunningWorkload]) -> capacity.Traffic:
    load = capacity.Traffic()
    for w in running:
        hosts = [h for h, _ in w.pods]
        if w.gang and len(hosts) > 1:
            load.add(fab, hosts, w.pods[0][1], w.pattern)
    return load


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_shortcuts_choose_what_the_full_search_chooses(case: Case) -> None:
    fab, running, want, with_traffic = case
    snap = snapshot.build(fab)
    free = used_free(fab, running)
    traffic = traffic_of(fab, running) if with_traffic else None
    pool = [w for w in running if w.priority < 1000]
    options = request.PlacementOptions()
    fast = victims.search(snap, free, pool, want, 100.0, traffic, options, None)
    full = victims.search(snap, free, pool, want, 100.0, traffic, options, None, exhaustive=True)
    assert fast == full
    everyone = [*running, preemption.RunningWorkload(ids.GangKey("above"), 1000, tuple(
        (h, 1) for h in sorted(fab.hosts)[:3]), 0.0)]  # the kept indexes may hold more than the pool
    kept = victims.search(snap, free, pool, want, 100.0, traffic, options, None,
                          kept=(victims.Indexed(everyone), workloads.Admits(1000)))
    assert kept == full


def test_the_cost_bound_is_never_above_the_cost() -> None:
    # Two leaves, each full: l1 one old gang, l2 two new half-leaf gangs. The bound of each
    # domain is at most what its search finds.
    from placement_builders import FabricBuilder, gang

    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").build()
    leaf = {name: [ids.NodeName(f"{name}-h{i}") for i in range(4)] for name in ("l1", "l2")}

    def on(key: str, hosts: list[ids.NodeName], started_s: float) -> preemption.RunningWorkload:
        return preemption.RunningWorkload(ids.GangKey(key), 0, tuple((h, 8) for h in hosts), started_s)

    running = [on("old", leaf["l1"], 0.0), on("a", leaf["l2"][:2], 90.0), on("b", leaf["l2"][2:], 90.0)]
    free = used_free(fab, running)
    want = gang(2, tier=0, required=True)
    snap = snapshot.build(fab)
    for name, hosts in leaf.items():
        local = [w for w in running if any(h in hosts for h, _ in w.pods)]
        inside = frozenset(hosts)
        bound = bounds.bound(fab, free, inside, local, want, 100.0)
        found = victims._in_domain(snap, free, inside, local, want, 100.0, request.PlacementOptions())
        assert bound is not None and found is not None
        assert bound <= victims._cost(found, 100.0), name
    chosen = victims.search(snap, free, running, want, 100.0, None, request.PlacementOptions(), None)
    assert chosen is not None and [w.key for w in chosen.victims] in (["a"], ["b"])


def test_a_tied_domain_with_a_slower_plan_loses_to_a_later_one_by_name() -> None:
    # Two spines of two 4-host leaves, every host held by a lone pod of the same age: clearing
    # either spine costs the same. s1 comes first by room and name, but traffic on its leaves
    # makes its plan slower than s2's: the shortcut must not stop at s1.
    from placement_builders import FabricBuilder, gang

    fab = FabricBuilder().spine("s1").leaf("a").leaf("b").spine("s2").leaf("c").leaf("d").build()
    running = [preemption.RunningWorkload(ids.GangKey(f"p-{h}"), 0, ((h, 8),), 0.0, gang=False)
               for h in sorted(fab.hosts)]
    free = {h: 0 for h in fab.hosts}
    loaded = capacity.Traffic({(0, "a"): 50.0, (0, "b"): 50.0})
    snap = snapshot.build(fab)
    options = request.PlacementOptions()
    for traffic, domain in ((None, (1, "s1")), (loaded, (1, "s2"))):
        fast = victims.search(snap, free, running, gang(8), 100.0, traffic, options, None)
        assert fast is not None and fast.domain == domain
        full = victims.search(snap, free, running, gang(8), 100.0, traffic, options, None, exhaustive=True)
        assert fast == full


def test_leaves_tied_on_every_cost_are_not_all_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    # Eight full leaves, each held by one gang started in the same second: every leaf ties on
    # criteria 1-4. The first by room left and name is searched and planned; the others are not.
    from placement_builders import FabricBuilder, gang

    builder = FabricBuilder().spine("s1")
    for n in range(8):
        builder = builder.leaf(f"l{n}")
    fab = builder.build()
    running = [preemption.RunningWorkload(ids.GangKey(f"g-{leaf}"), 0,
                                          tuple((h, 8) for h in fab.domains[(0, leaf)].hosts), 0.0)
               for leaf in (f"l{n}" for n in range(8))]
    free = {h: 0 for h in fab.hosts}
    snap = snapshot.build(fab)
    calls: list[int] = []
    place = placing.place

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return place(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(placing, "place", counted)
    fast = victims.search(snap, free, running, gang(4, tier=0, required=True), 100.0, None,
                          request.PlacementOptions(), None)
    assert fast is not None and fast.domain == (0, "l0") and [w.key for w in fast.victims] == ["g-l0"]
    searched = len(calls)
    full = victims.search(snap, free, running, gang(4, tier=0, required=True), 100.0, None,
                          request.PlacementOptions(), None, exhaustive=True)
    assert fast == full
    assert searched <= 4 < len(calls) - searched, (searched, len(calls) - searched)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_domain_a_set_clears_has_a_bound_no_higher_than_its_cost(case: Case) -> None:
    fab, running, want, _ = case
    snap = snapshot.build(fab)
    free = used_free(fab, running)
    options = request.PlacementOptions()
    for key in snap.tree.by_tier[victims.tier_of(snap, want)]:
        hosts = frozenset(victims.hosts_of(snap, key))
        local = [w for w in running if any(h in hosts for h, _ in w.pods)]
        found = victims._in_domain(snap, free, hosts, local, want, 100.0, options) if local else None
        if found is not None:
            bound = bounds.bound(fab, free, hosts, local, want, 100.0)
            assert bound is not None and bound <= victims._cost(found, 100.0), key
