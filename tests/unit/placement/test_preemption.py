"""The victim choice (placement.preemption): who is evicted, where, and when nobody is."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from placement_builders import FabricBuilder, all_free, gang, per_host

from fabricsched import ids
from fabricsched.placement import preemption, request, snapshot
from fabricsched.topology import fabric

Workload = preemption.RunningWorkload


def on(key: str, priority: int, hosts: Sequence[str], gpus: int = 8, started_s: float = 0.0,
       **flags: bool) -> Workload:
    """A workload of one pod of ``gpus`` GPUs on each of ``hosts``."""
    pods = tuple((ids.NodeName(h), gpus) for h in hosts)
    return Workload(ids.GangKey(key), priority, pods, started_s, gang=len(hosts) > 1, **flags)


def free_after(fab: fabric.Fabric, running: Sequence[Workload]) -> dict[ids.NodeName, int]:
    used: dict[str, int] = {}
    for w in running:
        for host, g in w.pods:
            used[host] = used.get(host, 0) + g
    return all_free(fab, used)


def leaf(name: str) -> list[str]:
    return [f"{name}-h{i}" for i in range(4)]


def choose(fab: fabric.Fabric, running: Sequence[Workload], want: request.GangRequest, priority: int,
           policy: preemption.PreemptionPolicy = preemption.PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
           options: preemption.Options = preemption.Options(),  # noqa: B008 - frozen
           ) -> preemption.Choice | preemption.NoVictims:
    return preemption.choose(snapshot.build(fab), free_after(fab, running), running,
                             preemption.Preemptor(want, priority, policy), now_s=1000.0, options=options)


def full(two_spines: fabric.Fabric) -> list[Workload]:
    """Every leaf full: l1 one low gang (older), l2 a mid gang, l3 two low half-leaf gangs, l4 one
    low gang (newer)."""
    return [on("low-l1", 100, leaf("l1"), started_s=0.0), on("mid-l2", 500, leaf("l2")),
            on("low-l3a", 100, leaf("l3")[:2]), on("low-l3b", 100, leaf("l3")[2:]),
            on("low-l4", 100, leaf("l4"), started_s=900.0)]


def test_a_required_leaf_gang_evicts_one_whole_low_gang_with_least_progress(
        two_spines: fabric.Fabric) -> None:
    result = choose(two_spines, full(two_spines), gang(4, tier=0, required=True), 1000)
    assert isinstance(result, preemption.Choice), result
    assert [w.key for w in result.victims] == ["low-l4"], "one workload, least progress lost"
    assert result.domain == (0, "l4")
    assert set(result.plan.ranks) == set(leaf("l4"))
    assert result.gpus_evicted == 32 and result.progress_lost_gpu_s == 32 * 100.0


def test_the_lowest_priority_goes_first_even_when_it_costs_more_gpus() -> None:
    fab = FabricBuilder().spine("s1").leaf("a").leaf("b").build()
    running = [on("low-gang", 10, leaf("a")), on("mid-pod", 50, ["b-h0"])]
    result = choose(fab, running, gang(4, tier=0, required=True), 1000)
    assert isinstance(result, preemption.Choice)
    assert [w.key for w in result.victims] == ["low-gang"]


def test_a_single_pod_evicts_one_single_pod_not_a_gang(two_spines: fabric.Fabric) -> None:
    running = [on("gang-l1", 0, leaf("l1")), *(on(f"pod-{h}", 0, [h]) for h in leaf("l2")),
               on("gang-l3", 0, leaf("l3")), on("gang-l4", 0, leaf("l4"))]
    result = choose(two_spines, running, gang(1), 1000)
    assert isinstance(result, preemption.Choice)
    assert len(result.victims) == 1 and result.victims[0].key.startswith("pod-")
    assert result.gpus_evicted == 8


def test_victims_are_minimal_none_could_be_spared(two_spines: fabric.Fabric) -> None:
    # Half-host pods: the gang needs two whole hosts of l1; the other leaves hold higher work.
    running = [on("a", 0, ["l1-h0"], gpus=4), on("b", 0, ["l1-h0"], gpus=4), on("c", 0, ["l1-h1"], gpus=4),
               on("d", 0, ["l1-h2"], gpus=8), on("e", 0, ["l1-h3"], gpus=8)]
    for name in ("l2", "l3", "l4"):
        running.append(on(f"busy-{name}", 5000, leaf(name)))
    want = gang(2, tier=0, required=True)
    result = choose(two_spines, running, want, 1000)
    assert isinstance(result, preemption.Choice)
    assert result.gpus_evicted == 12, "the fewest GPUs: c frees l1-h1's last 4, one more host's 8"
    snap = snapshot.build(two_spines)
    for spared in result.victims:
        rest = [w for w in running if w not in result.victims or w is spared]
        free = free_after(two_spines, rest)
        again = preemption.choose(snap, free, [], preemption.Preemptor(want, 0), 0.0)
        assert isinstance(again, preemption.NoVictims) and again.why is not preemption.Why.FITS, \
            f"{spared.key} could have been spared"


@pytest.mark.parametrize(("priority", "policy", "why"), [
    pytest.param(100, preemption.PreemptionPolicy.PREEMPT_LOWER_PRIORITY, preemption.Why.NO_LOWER_PRIORITY,
                 id="equal priority evicts nobody"),
    pytest.param(1000, preemption.PreemptionPolicy.NEVER, preemption.Why.NEVER,
                 id="preemptionPolicy Never waits"),
])
def test_nobody_is_evicted(two_spines: fabric.Fabric, priority: int, policy: preemption.PreemptionPolicy,
                           why: preemption.Why) -> None:
    running = [on(f"w-{n}", 100 if n != "l2" else 500, leaf(n)) for n in ("l1", "l2", "l3", "l4")]
    result = choose(two_spines, running, gang(4, tier=0, required=True), priority, policy)
    assert isinstance(result, preemption.NoVictims) and result.why is why, result


def test_a_gang_that_fits_evicts_nobody(two_spines: fabric.Fabric) -> None:
    result = choose(two_spines, [on("w", 0, leaf("l1"))], gang(4), 1000)
    assert isinstance(result, preemption.NoVictims) and result.why is preemption.Why.FITS


@pytest.mark.parametrize("flag", ["protected", "kueue", "opted_out"])
def test_only_protected_victims_means_waiting(two_spines: fabric.Fabric, flag: str) -> None:
    running = [on(f"w-{n}", 0, leaf(n), **{flag: True}) for n in ("l1", "l2", "l3", "l4")]
    result = choose(two_spines, running, gang(4, tier=0, required=True), 1000)
    assert isinstance(result, preemption.NoVictims) and result.why is preemption.Why.ONLY_PROTECTED
    assert "protected" in result.reason


def test_kueue_workloads_are_victims_only_with_the_flag(two_spines: fabric.Fabric) -> None:
    running = [on(f"w-{n}", 0, leaf(n), kueue=True) for n in ("l1", "l2", "l3", "l4")]
    options = preemption.Options(evict_kueue=True)
    result = choose(two_spines, running, gang(4, tier=0, required=True), 1000, options=options)
    assert isinstance(result, preemption.Choice) and len(result.victims) == 1


def test_not_enough_lower_priority_work(two_spines: fabric.Fabric) -> None:
    running = [on("low", 0, leaf("l1")[:1]), *(on(f"hi-{n}", 9000, leaf(n)) for n in ("l2", "l3", "l4")),
               on("hi-rest", 9000, leaf("l1")[1:])]
    result = choose(two_spines, running, gang(4, tier=0, required=True), 1000)
    assert isinstance(result, preemption.NoVictims) and result.why is preemption.Why.NOT_ENOUGH


def test_the_healthy_domain_wins_a_tie() -> None:
    fab = FabricBuilder().spine("s1").leaf("a").leaf("b").build()
    for degraded in ("a", "b"):
        sick = FabricBuilder().spine("s1").leaf("a").leaf("b").degrade_host(f"{degraded}-h1").build()
        running = [on("x", 0, leaf("a")), on("y", 0, leaf("b"))]
        result = choose(sick, running, gang(4, tier=0, required=True), 1000)
        assert isinstance(result, preemption.Choice)
        assert result.domain[1] != degraded and not result.plan.degraded_path
    assert fab.hosts


def test_a_gang_without_tier_clears_the_lowest_tier_that_holds_it(two_spines: fabric.Fabric) -> None:
    result = choose(two_spines, full(two_spines), gang(8), 1000)
    assert isinstance(result, preemption.Choice)
    assert result.domain[0] == 1, "8 pods of 8 GPUs: a spine, not a leaf"
    assert all(w.priority == 100 for w in result.victims)
    assert max(per_host(result.plan.ranks).values()) == 1


def reservation(key: str, priority: int, hosts: Sequence[str], bound: bool = False) -> preemption.Reservation:
    pods = tuple((ids.NodeName(h), 8) for h in hosts)
    return preemption.Reservation(ids.GangKey(key), priority, pods, bound)


def test_an_unbound_lower_reservation_yields(two_spines: fabric.Fabric) -> None:
    held = [reservation(f"r-{n}", 0, leaf(n), bound=n != "l3") for n in ("l1", "l2", "l3", "l4")]
    free = {n: 0 for n in two_spines.hosts}
    want = preemption.Preemptor(gang(4, tier=0, required=True), 10)
    result = preemption.yielding(snapshot.build(two_spines), free, held, want)
    assert isinstance(result, preemption.Choice)
    assert [w.key for w in result.victims] == ["r-l3"], "only the unbound one yields"
    never = preemption.Preemptor(want.gang, 10, preemption.PreemptionPolicy.NEVER)
    refused = preemption.yielding(snapshot.build(two_spines), free, held, never)
    assert isinstance(refused, preemption.NoVictims)


def test_a_gang_across_two_leaves_is_a_candidate_in_each(two_spines: fabric.Fabric) -> None:
    # The domain's candidates are read from its hosts: a gang with pods in l1 and l2 is found
    # from either leaf, once, and evicted whole wherever it is chosen.
    across = on("low-across", 100, [*leaf("l1")[2:], *leaf("l2")[:2]], started_s=0.0)
    running = [on("mid-l1", 500, leaf("l1")[:2]), across, on("mid-l2", 500, leaf("l2")[2:]),
               on("mid-l3", 500, leaf("l3")), on("mid-l4", 500, leaf("l4"))]
    result = choose(two_spines, running, gang(2, tier=0, required=True), 1000)
    assert isinstance(result, preemption.Choice), result
    assert [w.key for w in result.victims] == ["low-across"]
    assert result.domain == (0, "l1"), "a tie on every criterion but the name"
    assert result.gpus_evicted == 32
