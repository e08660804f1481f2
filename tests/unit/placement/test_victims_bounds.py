"""Each domain's cost bound kept from one victim search to the next (``bounds.Bounds``): kept
while nothing under the domain changed, made again when its candidates, free GPUs, admitted
pool or the gang's shape did, and the searches that read kept bounds choose what a search made
afresh chooses."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import FabricBuilder, gang
from test_victims_shortcuts import Case, cases, used_free

from fabricsched import ids
from fabricsched.placement import bounds, preemption, request, snapshot, victims, workloads

W = preemption.RunningWorkload


class KeptLists:
    """Kept indexes as the extender keeps them: a domain's list is the same object until one of
    its workloads changes, and the bounds are kept between searches."""

    def __init__(self, snap: snapshot.Snapshot, tier: int, running: list[W]) -> None:
        self.snap, self.tier = snap, tier
        self._bounds = bounds.Bounds()
        self._on_host = victims.by_host(running)
        self._on_domain = victims.by_domain(snap, tier, self._on_host)

    def moved(self, running: list[W], hosts: set[ids.NodeName]) -> None:
        """``running`` now; only the domains of ``hosts`` get new lists."""
        self._on_host = victims.by_host(running)
        again = [key for key in self.snap.tree.by_tier[self.tier]
                 if hosts & set(victims.hosts_of(self.snap, key))]
        self._on_domain = {**self._on_domain, **victims.by_domain(self.snap, self.tier, self._on_host, again)}

    def by_host(self) -> workloads.OnHost:
        return self._on_host

    def by_domain(self, snap: snapshot.Snapshot, tier: int) -> workloads.OnDomain:
        assert tier == self.tier
        return self._on_domain

    def bounds(self) -> bounds.Bounds:
        return self._bounds


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.data())
def test_searches_on_kept_bounds_choose_what_a_fresh_search_chooses(case: Case, data: st.DataObject) -> None:
    fab, running, want, _ = case
    snap = snapshot.build(fab)
    options = request.PlacementOptions()
    tier = victims.tier_of(snap, want)
    kept = KeptLists(snap, tier, running)
    for step in range(4):
        free = used_free(fab, running)
        for host in data.draw(st.lists(st.sampled_from(sorted(fab.hosts)), max_size=4), label="reserved"):
            free[host] = 0  # reserved, or not any more: the free GPUs move, the workloads do not
        below = data.draw(st.sampled_from([10, 100, 1000]), label="below")
        admits = workloads.Admits(below)
        pool = admits.among(running)
        now = 100.0 + 10 * step  # the progress term moves with the clock
        fresh = victims.search(snap, free, pool, want, now, None, options, None, exhaustive=True)
        assert victims.search(snap, free, pool, want, now, None, options, None, kept=(kept, admits)) == fresh
        on_domain = kept.by_domain(snap, tier)
        for key in snap.tree.by_tier[tier]:
            hosts = frozenset(victims.hosts_of(snap, key))
            local = [w for w in pool if any(h in hosts for h, _ in w.pods)]
            made = bounds.DomainBound.of(fab, free, hosts, local, want)
            held = kept.bounds().of(snap, free, tier, key, on_domain.get(key, ()), admits, want)
            assert (held.level, held.least_gpus, held.cost(now)) == (
                made.level, made.least_gpus, made.cost(now)), key
        if not running:
            break
        gone = data.draw(st.sampled_from(running), label="evicted")
        running = [w for w in running if w is not gone]
        kept.moved(running, {h for h, _ in gone.pods})


def test_a_bound_is_kept_until_something_under_its_domain_changes() -> None:
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").build()
    snap = snapshot.build(fab)
    hosts = {key: list(victims.hosts_of(snap, key)) for key in snap.tree.by_tier[0]}
    l1, l2 = sorted(hosts)
    running = [W(ids.GangKey(f"p-{h}"), 0, ((h, 8),), 0.0, gang=False) for h in fab.hosts]
    free = used_free(fab, running)
    found = victims.by_domain(snap, 0, victims.by_host(running))
    kept_bounds, admits, want = bounds.Bounds(), workloads.Admits(10), gang(2, tier=0, required=True)

    def of(key: victims.DomainKey, free: dict[ids.NodeName, int] = free, admits: workloads.Admits = admits,
           want: request.GangRequest = want) -> bounds.DomainBound:
        return kept_bounds.of(snap, free, 0, key, found[key], admits, want)

    first = of(l1)
    assert first.cost(100.0) == (0, 16, 1, 800.0)
    assert of(l1) is first, "nothing changed: kept"
    assert of(l1, {**free, hosts[l2][0]: 8}) is first, "another domain's host: kept"
    moved = of(l1, {**free, hosts[l1][0]: 8})
    assert moved is not first and moved.cost(100.0) == (0, 8, 1, 800.0), "a host of its own freed"
    assert of(l1, admits=workloads.Admits(0)).cost(100.0) is None, "nothing admitted: no set"
    assert of(l1, want=gang(1, tier=0, required=True)).cost(100.0) == (0, 8, 1, 800.0)
    found[l1] = list(found[l1])  # the same workloads in a new list: looked at again
    assert of(l1) is not first and of(l1) == first


@given(st.lists(st.tuples(st.integers(1, 8), st.none() | st.sampled_from([0.0, 5.0, 50.0, 90.0, 120.0])),
                min_size=1, max_size=12),
       st.sampled_from([0.0, 60.0, 100.0, 1e6]))
def test_the_least_progress_is_among_the_few_kept_for_it(
    pods: list[tuple[int, float | None]], now: float,
) -> None:
    workloads = [W(ids.GangKey(f"w{i}"), 0, ((ids.NodeName("h"), g),), started)
                 for i, (g, started) in enumerate(pods)]
    few = bounds._least_progress(workloads)
    assert min(w.progress(now) for w in few) == min(w.progress(now) for w in workloads)
    assert len(few) <= len({w.gpus for w in workloads}), "one per GPU count at most"


def test_a_fabric_changed_forgets_every_bound() -> None:
    first = FabricBuilder().spine("s1").leaf("l1").build()
    second = FabricBuilder().spine("s1").leaf("l1").build()
    running = [W(ids.GangKey(f"p-{h}"), 0, ((h, 8),), 0.0, gang=False) for h in first.hosts]
    kept_bounds, admits, want = bounds.Bounds(), workloads.Admits(10), gang(1, tier=0, required=True)
    kept = []
    for fab in (first, second, first):
        snap = snapshot.build(fab)
        found = victims.by_domain(snap, 0, victims.by_host(running))
        (key,) = found
        kept.append(kept_bounds.of(snap, used_free(fab, running), 0, key, found[key], admits, want))
    assert kept[0] is not kept[2], "the bounds of the first fabric were forgotten"
    assert kept[0] == kept[2] and kept[0].cost(10.0) == (0, 8, 1, 80.0)


def test_kept_bounds_stay_one_per_domain_however_many_searches_flood_them() -> None:
    # Every search may bring new free counts, pools and gang shapes: the kept bounds replace
    # each domain's entry, never add beside it.
    fab = FabricBuilder().spine("s1").leaf("l1").leaf("l2").build()
    snap = snapshot.build(fab)
    running = [W(ids.GangKey(f"p-{h}"), 0, ((h, 8),), 0.0, gang=False) for h in fab.hosts]
    found = workloads.by_domain(snap, 0, workloads.by_host(running))
    kept_bounds = bounds.Bounds()
    hosts = sorted(fab.hosts)
    for i in range(5_000):
        free = {h: (i + n) % 9 for n, h in enumerate(hosts)}
        admits = workloads.Admits(i % 50)
        want = gang(1 + i % 4, gpus=1 + i % 8, tier=0, required=True)
        for key in found:
            kept_bounds.of(snap, free, 0, key, found[key], admits, want)
    assert len(kept_bounds._kept) == len(found) == 2
