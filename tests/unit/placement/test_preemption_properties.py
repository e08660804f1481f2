"""Properties of the victim choice on random small fabrics full of random work (hypothesis).

Whatever the fabric, its health and the work on it: a victim never has the preemptor's
priority or more and is never protected; once the victims are gone the plan fits (no host
over its GPUs) inside the domain chosen; and no victim could have been spared (in that domain).
"""

from __future__ import annotations

from fabric_strategies import fabrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import all_free, per_host

from fabricsched import ids
from fabricsched.placement import placing, preemption, request, snapshot
from fabricsched.topology import fabric

Case = tuple[fabric.Fabric, list[preemption.RunningWorkload], preemption.Preemptor]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    fab = draw(fabrics())
    running: list[preemption.RunningWorkload] = []
    left = {n: h.gpus for n, h in sorted(fab.hosts.items())}
    for i in range(draw(st.integers(0, 8))):
        g = draw(st.sampled_from([1, 2, 4]))
        hosts = [n for n, free in left.items() if free >= g]
        if not hosts:
            break
        chosen = draw(st.lists(st.sampled_from(hosts), min_size=1, max_size=3))
        pods: list[tuple[ids.NodeName, int]] = []
        for name in chosen:
            if left[name] >= g:
                left[name] -= g
                pods.append((name, g))
        running.append(preemption.RunningWorkload(
            ids.GangKey(f"w{i}"), draw(st.sampled_from([0, 10, 100])), tuple(pods),
            started_s=draw(st.floats(0, 100)), gang=len(pods) > 1,
            protected=draw(st.booleans()) and i % 3 == 0))
    for name, free in left.items():  # mostly full: what preemption is for
        if free and draw(st.integers(0, 3)):
            priority = draw(st.sampled_from([0, 10, 100]))
            running.append(preemption.RunningWorkload(ids.GangKey(f"fill-{name}"), priority, ((name, free),),
                                               started_s=0.0, gang=False))
    tier = draw(st.none() | st.integers(0, len(fab.tiers) - 1))
    want = request.GangRequest(ids.GangKey("hi"), draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4])),
                               tier, tier is not None and draw(st.booleans()))
    return fab, running, preemption.Preemptor(want, draw(st.sampled_from([0, 10, 100, 1000])))


def free_without(fab: fabric.Fabric, running: list[preemption.RunningWorkload]) -> dict[ids.NodeName, int]:
    used: dict[str, int] = {}
    for w in running:
        for host, g in w.pods:
            used[host] = used.get(host, 0) + g
    return all_free(fab, used)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_victims_are_lower_unprotected_enough_and_necessary(case: Case) -> None:
    fab, running, preemptor = case
    snap = snapshot.build(fab)
    result = preemption.choose(snap, free_without(fab, running), running, preemptor, now_s=100.0)
    if isinstance(result, preemption.NoVictims):
        return
    assert result.victims, "a choice evicts someone"
    for w in result.victims:
        assert w.priority < preemptor.priority, "never a victim of equal or higher priority"
        assert not w.protected
    left = [w for w in running if w not in result.victims]
    free = free_without(fab, left)
    gang = preemptor.gang
    assert len(result.plan.ranks) == gang.pods
    for host, pods in per_host(result.plan.ranks).items():
        assert pods * gang.gpus_per_pod <= free[ids.NodeName(host)] <= fab.hosts[ids.NodeName(host)].gpus, \
            "no host over its GPUs once the victims are gone"
    tier, name = result.domain
    if tier < len(fab.tiers):
        assert all(fab.hosts[h].path[tier] == name for h in result.plan.ranks), "inside the domain cleared"
    inside = [h for h in fab.hosts if tier >= len(fab.tiers) or fab.hosts[h].path[tier] == name]
    for spared in result.victims:
        again = free_without(fab, [*left, spared])
        retry = placing.place(snap, again, gang, None, request.PlacementOptions(), inside)
        assert isinstance(retry, request.NoFit), f"{spared.key} could have been spared"
