"""Topology-aware gang preemption: which running workloads a gang that cannot be placed evicts.

A pure function of the snapshot (docs/preemption.md is the specification): the fabric, the
free GPUs, the workloads running on the fabric's hosts (with the flags only the caller can
know: covered by a PodDisruptionBudget that forbids it, managed by Kueue, opted out) and the
gang with its priority and preemption policy -> the domain to clear, the victims and the plan
that fits once they are gone, or ``NoVictims`` with the reason. The extender and the simulator
(``fabric`` policy) both call it; the fit of every candidate set is tested by the engine itself
(``placing.place``), so there is no second placement engine here.

``yielding`` answers the rule before it, "reservations yield first": which unbound
lower-priority reservations to drop so the gang fits with no eviction at all. The search both
share is ``victims.search``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from fabricsched import ids
from fabricsched.placement import capacity, placing, reasons, request, snapshot, victims, workloads

DomainKey = victims.DomainKey
RunningWorkload = workloads.RunningWorkload
Choice = victims.Choice


class PreemptionPolicy(enum.Enum):
    """The gang's ``preemptionPolicy`` (a PriorityClass's, or a native PodGroup's)."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True)
class Preemptor:
    """The gang that cannot be placed, with its priority."""

    gang: request.GangRequest
    priority: int
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY


@dataclass(frozen=True)
class Options:
    placement: request.PlacementOptions = field(default_factory=request.PlacementOptions)
    """How fit is tested and plans compared (health-aware or not), as for any placement."""
    evict_kueue: bool = False
    """Kueue-managed workloads are never victims unless this is set: Kueue owns their lifecycle
    and its quota would leak."""


class Why(enum.Enum):
    """Why nothing is evicted: what the caller says (Events, explain) and counts."""

    FITS = "fits"
    """A plan exists without eviction: preemption never improves a placement."""
    NEVER = "never"
    UNRESOLVABLE = "unresolvable"
    NO_LOWER_PRIORITY = "no-lower-priority"
    ONLY_PROTECTED = "only-protected"
    NOT_ENOUGH = "not-enough"
    """Evicting every candidate would still leave no domain that holds the gang."""


@dataclass(frozen=True)
class NoVictims:
    reason: str
    why: Why


@dataclass(frozen=True)
class Reservation:
    """GPUs held for another gang that has not started (no rank bound yet, or some)."""

    key: ids.GangKey
    priority: int
    pods: tuple[tuple[ids.NodeName, int], ...]
    """(host, GPUs) of every reserved rank."""
    bound: bool
    """Some rank is bound: the reservation no longer yields."""


_DEFAULT_OPTIONS = Options()


def choose(
    snap: snapshot.Snapshot,
    free: Mapping[ids.NodeName, int],
    running: Sequence[RunningWorkload],
    preemptor: Preemptor,
    now_s: float,
    traffic: capacity.Traffic | None = None,
    options: Options = _DEFAULT_OPTIONS,
    candidates: Collection[ids.NodeName] | None = None,
    kept: victims.KeptIndexes | None = None,
    known: request.NoFit | None = None,
) -> Choice | NoVictims:
    """The domain to clear, the victims and the plan after them, or why not.

    ``free`` is GPUs free per host after every reservation; ``running`` every workload holding
    GPUs on the fabric's hosts, whoever scheduled it; ``traffic`` the running gangs' load
    (victims included: their part is taken off for the final plan); ``now_s`` prices the
    progress a victim loses (its GPUs x the time since it started); ``kept`` the caller's
    indexes of ``running`` (or of more workloads) when it keeps them; ``known`` the
    engine's answer for the gang on ``free`` (no plan) when the caller asked it already.
    """
    gang = preemptor.gang
    what = reasons.gang(gang.pods, gang.gpus_per_pod)
    if preemptor.policy is PreemptionPolicy.NEVER:
        return NoVictims(f"preemptionPolicy Never: {what} waits for room and evicts nobody", Why.NEVER)
    blocked = _blocked(snap, free, gang, options, candidates, known)
    if blocked is not None:
        return blocked
    lower = [w for w in running if w.priority < preemptor.priority]
    if not lower:
        return NoVictims(f"no lower-priority work to evict: every workload on the fabric has priority "
                         f">= {preemptor.priority}", Why.NO_LOWER_PRIORITY)
    admits = workloads.Admits(preemptor.priority, options.evict_kueue)
    pool = admits.among(lower)
    if not pool:
        return NoVictims(f"only protected victims: {_protected_note(lower, options)}; {what} waits",
                         Why.ONLY_PROTECTED)
    found = victims.search(snap, free, pool, gang, now_s, traffic, options.placement, candidates,
                           kept=None if kept is None else (kept, admits))
    if found is not None:
        return found
    held_back = len(lower) - len(pool)
    note = f" ({held_back} more are protected: {_protected_note(lower, options)})" if held_back else ""
    where = victims.tier_name(snap, gang)
    return NoVictims(f"evicting all {len(pool)} lower-priority workloads would still leave no {where} "
                     f"with room for {what}{note}", Why.NOT_ENOUGH)


def yielding(
    snap: snapshot.Snapshot,
    free: Mapping[ids.NodeName, int],
    held: Sequence[Reservation],
    preemptor: Preemptor,
    traffic: capacity.Traffic | None = None,
    options: Options = _DEFAULT_OPTIONS,
    candidates: Collection[ids.NodeName] | None = None,
    known: request.NoFit | None = None,
) -> Choice | NoVictims:
    """"Reservations yield first": the unbound lower-priority reservations to drop so the gang
    fits with no eviction, chosen as victims are (a reservation has no progress to lose).

    ``free`` is GPUs free per host after every reservation, ``held`` included. The answer's
    ``victims`` are the dropped reservations, as workloads with their keys. ``known`` as for
    ``choose``.
    """
    gang = preemptor.gang
    what = reasons.gang(gang.pods, gang.gpus_per_pod)
    if preemptor.policy is PreemptionPolicy.NEVER:
        return NoVictims(f"preemptionPolicy Never: {what} takes no other gang's reservation", Why.NEVER)
    blocked = _blocked(snap, free, gang, options, candidates, known)
    if blocked is not None:
        return blocked
    pool = [RunningWorkload(r.key, r.priority, r.pods, started_s=0.0)
            for r in held if not r.bound and r.priority < preemptor.priority]
    if not pool:
        return NoVictims(f"no unbound reservation of priority < {preemptor.priority}", Why.NO_LOWER_PRIORITY)
    found = victims.search(snap, free, pool, gang, 0.0, traffic, options.placement, candidates)
    if found is not None:
        return found
    return NoVictims(f"dropping all {len(pool)} unbound lower-priority reservations would still leave no "
                     f"{victims.tier_name(snap, gang)} with room for {what}", Why.NOT_ENOUGH)


def _blocked(
    snap: snapshot.Snapshot, free: Mapping[ids.NodeName, int], gang: request.GangRequest, options: Options,
    candidates: Collection[ids.NodeName] | None, known: request.NoFit | None,
) -> NoVictims | None:
    """Preemption is only for a gang that cannot be placed at all, and could be in the empty fabric.
    ``known``: the engine's answer on ``free`` when the caller asked it already (not asked again)."""
    now = known if known is not None else placing.place(snap, free, gang, None, options.placement, candidates)
    if isinstance(now, request.Plan):
        return NoVictims("a plan exists without preemption", Why.FITS)
    if now.unresolvable:
        return NoVictims(now.reason, Why.UNRESOLVABLE)
    return None


def _protected(workload: RunningWorkload, options: Options) -> bool:
    return not workloads.Admits(workload.priority + 1, options.evict_kueue).among((workload,))


def _protected_note(lower: Sequence[RunningWorkload], options: Options) -> str:
    budget = sum(w.protected for w in lower)
    kueue = sum(w.kueue and not options.evict_kueue for w in lower)
    opted = sum(w.opted_out for w in lower)
    parts = [f"{budget} by a PodDisruptionBudget" if budget else "",
             f"{kueue} managed by Kueue" if kueue else "",
             f"{opted} opted out" if opted else ""]
    shown = ", ".join(p for p in parts if p)
    return f"{sum(_protected(w, options) for w in lower)} lower-priority workloads are protected ({shown})"
