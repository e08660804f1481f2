"""A gang restarted as a whole goes back where it ran, when that is as good as a fresh plan.

A controller that restarts a whole group (a JobSet's failure policy, a Kubeflow TrainJob, a
LeaderWorkerSet's ``RecreateGroupOnPodRestart``) ends every old pod first, so the gang's plan
is released and its new pods are planned from scratch: best fit alone may then pick another
domain even when the old one is free again. Users want the old one back (checkpoints and
caches on its hosts, one picture for the people troubleshooting the job), as a pod recreated
for one rank already returns to that rank's node.

The caller passes where the gang ran (``request.Previous``); ``back`` asks the engine once
more, on the previous hosts when each can take its ranks now (rank by rank, as before), else
inside the lowest domain that held them all, and keeps that plan only when it is no worse than
the fresh one: no higher comm_slowdown, no degraded element the fresh plan avoids, the fresh
plan's preferred tier and whole slices kept. Pure, like the engine.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Collection, Mapping, Sequence

from fabricsched import ids
from fabricsched.placement import capacity, placing, ranks, reasons, request, snapshot
from fabricsched.topology import fabric

SAME_HOSTS = "back on its previous hosts"
SLACK = 1e-9
"""Relative slack of the slowdown comparison: equal plans priced in another order are equal."""


def back(
    snap: snapshot.Snapshot,
    free: Mapping[ids.NodeName, int],
    gang: request.GangRequest,
    traffic: capacity.Traffic | None,
    options: request.PlacementOptions,
    candidates: Collection[ids.NodeName] | None,
    previous: request.Previous,
    fresh: request.Plan,
) -> request.Plan:
    """``fresh`` (the engine's plan for ``gang``), or the plan where the gang ran before when it
    is as good: at most one more engine call."""
    fab = snap.fabric
    known = [n for n in previous.ranks if n in fab.hosts]
    if not known:
        return fresh
    if collections.Counter(fresh.ranks) == collections.Counter(previous.ranks):
        # Best fit chose the same hosts again: only the ranks' order may differ (no engine call).
        return _noted(fab, gang, SAME_HOSTS, _rank_by_rank(snap, gang, traffic, fresh, previous.ranks), fresh)
    if _hosts_take_ranks(fab, free, gang, previous.ranks, candidates):
        area, why = set(known), SAME_HOSTS
    else:
        home = fab.home_of(known)
        if home is None:
            return fresh  # it spanned the whole fabric: nothing narrower to go back to
        area = set(fab.domains[home].hosts)
        why = f"back in its previous {reasons.tier_name(fab, home[0])} {home[1]}"
        if area.issuperset(fresh.ranks):
            return dataclasses.replace(fresh, reasons=(why, *fresh.reasons))  # best fit went back itself
    if candidates is not None:
        area &= set(candidates)
    made = placing.place(snap, free, gang, traffic, options, area)
    if not isinstance(made, request.Plan):
        return _declined(fresh, why, "no room there now")
    if why == SAME_HOSTS:
        made = _rank_by_rank(snap, gang, traffic, made, previous.ranks)
    return _noted(fab, gang, why, made, fresh)


def _noted(fab: fabric.Fabric, gang: request.GangRequest, why: str, made: request.Plan,
           fresh: request.Plan) -> request.Plan:
    """``made`` saying why, when it is as good as ``fresh``; else ``fresh`` saying why not."""
    worse = _worse(made, fresh, fab, gang)
    if worse:
        return _declined(fresh, why, worse)
    return dataclasses.replace(made, reasons=(why, *made.reasons))


def _declined(fresh: request.Plan, why: str, cause: str) -> request.Plan:
    return dataclasses.replace(fresh, reasons=(*fresh.reasons, f"not {why}: {cause}"))


def _hosts_take_ranks(
    fab: fabric.Fabric, free: Mapping[ids.NodeName, int], gang: request.GangRequest,
    before: Sequence[ids.NodeName], candidates: Collection[ids.NodeName] | None,
) -> bool:
    """Every rank of the gang had a host, and each such host is healthy, a candidate, and has
    the GPUs of all its ranks free now."""
    if len(before) != gang.pods:
        return False
    allowed = None if candidates is None else set(candidates)
    for node, count in collections.Counter(before).items():
        host = fab.hosts.get(node)
        if host is None or host.degraded or (allowed is not None and node not in allowed):
            return False
        if free.get(node, 0) < count * gang.gpus_per_pod:
            return False
    return True


def _rank_by_rank(
    snap: snapshot.Snapshot, gang: request.GangRequest, traffic: capacity.Traffic | None,
    made: request.Plan, before: Sequence[ids.NodeName],
) -> request.Plan:
    """``made`` with every rank on its node of before, when it uses the same hosts as many times
    (a ring is priced again in that order; slices kept whole by the engine's order stay so)."""
    if collections.Counter(made.ranks) != collections.Counter(before):
        return made
    order = tuple(before)
    named: tuple[ids.DomainName, ...] = ()
    if gang.sliced and gang.slice_tier is not None:
        named = ranks.slice_domains(snap.fabric, order, gang.slice_pods, gang.slice_tier)
        if made.slice_domains and not named:
            return made
    slowdown = capacity.comm_slowdown(snap.fabric, order, gang.gpus_per_pod, traffic, snap.capacities,
                                      gang.pattern)
    return dataclasses.replace(made, ranks=order, domains=ranks.domains_used(snap.fabric, order),
                               comm_slowdown=slowdown, slice_domains=named)


def _worse(made: request.Plan, fresh: request.Plan, fab: fabric.Fabric, gang: request.GangRequest) -> str:
    """How ``made`` is worse than ``fresh`` ('' when it is not): a higher slowdown, a degraded
    element the fresh plan avoids, something the gang prefers (its lower tier, whole slices)
    given up that the fresh plan keeps."""
    avoided = set(capacity.degraded_elements(fab, made.ranks)).difference(
        capacity.degraded_elements(fab, fresh.ranks))
    if avoided:
        return f"its path there crosses {sorted(avoided)[0]}"
    if made.comm_slowdown > fresh.comm_slowdown * (1 + SLACK):
        return f"comm slowdown {made.comm_slowdown:.2f} there, {fresh.comm_slowdown:.2f} elsewhere"
    if fresh.slice_domains and not made.slice_domains:
        return "its slices would not stay whole there"
    preferred = gang.preferred
    if preferred is not None and _inside(fresh, preferred) and not _inside(made, preferred):
        return f"no single {reasons.tier_name(fab, preferred)} holds it there"
    return ""


def _inside(plan: request.Plan, tier: int) -> bool:
    """The plan is inside one domain of ``tier`` (one host counts as inside every tier)."""
    return plan.tier is None or plan.tier <= tier
