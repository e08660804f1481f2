"""The book of plans: which node every rank of every gang holds, and for how long.

Pure: no I/O, no clock reads (``now`` is a parameter, seconds since the epoch, because
``expiresAt`` is written to FabricPlacement objects and read back after a restart).

Life of an entry (docs/extender.md, FabricPlacement): the first pod of a gang gets a plan, which
is ``Reserved`` for the whole gang. Ranks bind one at a time; a bound rank is held by its
pod (the cluster state counts it as usage), an unbound rank by the book (other gangs see it
as reserved GPUs). When every rank is bound the entry is ``Bound``. If the gang makes no
progress for ``reservation_ttl_s`` its unbound ranks are let go (``Expired``); a later pod
of the gang plans them again. A rank whose pod ends keeps its node, so the replacement pod
returns there. A preemptor's reservation is also held while its victims terminate: its clock
runs for their grace period and a margin more, and starts again from the TTL once the last
victim pod is gone (``clear_hold``). The entry is ``Released`` when its Job finishes or is deleted, or all its
pods end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from fabricsched import gangs, ids
from fabricsched.api.conditions import Condition
from fabricsched.api.placement import PathElement, PlacementPhase
from fabricsched.extender.book import preempted
from fabricsched.placement import request


@dataclass(frozen=True)
class BookOptions:
    reservation_ttl_s: float = 120.0
    """Seconds without a newly bound rank after which unbound ranks are let go."""

    def __post_init__(self) -> None:
        if self.reservation_ttl_s <= 0:
            raise ValueError(f"reservation TTL must be positive, not {self.reservation_ttl_s}")


@dataclass(frozen=True)
class Entry:
    """One gang's plan and progress (what its FabricPlacement object shows)."""

    key: ids.GangKey
    namespace: str
    name: str
    job_uid: str
    job_name: str | None
    size: int
    gpus_per_pod: int
    topology: ids.TopologyName
    tier: str | None
    """Constraint tier name (None: preferred lowest)."""
    required: bool
    ranks: tuple[ids.NodeName | None, ...]
    """Node of every rank; None for a rank let go by expiry (planned again on demand)."""
    bound: Mapping[int, ids.NodeName] = field(default_factory=dict)
    """Ranks whose pod is bound and live, with the node it is bound to."""
    expires_at: float = 0.0
    phase: PlacementPhase = PlacementPhase.RESERVED
    """The FabricPlacement's ``status.phase``."""
    domains: Mapping[str, tuple[ids.DomainName, ...]] = field(default_factory=dict)
    """Domains used, by tier name."""
    comm_slowdown: float = 1.0
    """The slowdown now (``path_health`` follows the fabric's health)."""
    degraded_path: bool = False
    reasons: tuple[str, ...] = ()
    comm_slowdown_at_placement: float | None = None
    """The engine's prediction when it made the plan (None: the same as ``comm_slowdown``)."""
    unhealthy: tuple[PathElement, ...] = ()
    """Unhealthy elements on the path, worst first, capped (``unhealthy_count`` counts them all)."""
    unhealthy_count: int = 0
    waiting: tuple[str, str] | None = None
    """(reason, message) of a Pending gang: why it has no plan yet."""
    conditions: tuple[Condition, ...] = ()
    """The conditions read back from the object (the writer dates new ones from these)."""
    pod_ranks: Mapping[str, int] = field(default_factory=dict)
    """Pod UID -> rank, for pods that carry no rank of their own (non-indexed Jobs)."""
    gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE
    """The GPU resource of its fabric (``spec.gpuResource``): its pods' ranks are read with it."""
    preferred_tier: str | None = None
    """A lower preferred tier beside a required ``tier``."""
    slices: request.Slices | None = None
    slice_domains: tuple[ids.DomainName, ...] = ()
    """The domain of each slice, slice 0 first; empty when no slices or they did not hold."""
    priority: int = 0
    """The gang's priority: whom it may preempt, and whose reservation yields to it."""
    preemption: preempted.PreemptionHold | None = None
    """What it evicted for this plan (docs/preemption.md): its hold outlives the victims."""
    preempted_by: preempted.PreemptedRecord | None = None
    """Who last preempted it (kept when a new plan replaces the old)."""
    traffic: request.Pattern | None = None
    """The traffic pattern its plan is priced with (a plan's: the gang's, else its fabric's);
    None: all-to-all (a Pending gang that named none, an object written before the field)."""

    @classmethod
    def of_gang(
        cls, gang: gangs.GangIdentity, topology: ids.TopologyName, ranks: tuple[ids.NodeName | None, ...],
        gpu_resource: str = gangs.DEFAULT_GPU_RESOURCE,
    ) -> Entry:
        """An entry carrying the gang's identity on ``topology``: what a plan and a Pending
        record share; the caller adds the rest."""
        return cls(
            key=gang.key, namespace=gang.namespace, name=gang.name, job_uid=gang.job_uid,
            job_name=gang.job_name, size=gang.size, gpus_per_pod=gang.gpus_per_pod, topology=topology,
            tier=gang.tier, required=gang.required, ranks=ranks, gpu_resource=gpu_resource,
            preferred_tier=gang.preferred_tier, slices=gang.slices, traffic=gang.traffic,
        )

    @property
    def display(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pattern(self) -> request.Pattern:
        return request.Pattern.ALL_TO_ALL if self.traffic is None else self.traffic

    @property
    def active(self) -> bool:
        return self.phase in (PlacementPhase.RESERVED, PlacementPhase.BOUND, PlacementPhase.EXPIRED)

    def unbound(self) -> list[int]:
        return [r for r in range(self.size) if r not in self.bound]

    def held(self) -> Iterator[tuple[int, ids.NodeName]]:
        """Ranks the book holds for this gang: planned and not (yet) bound."""
        for rank, node in enumerate(self.ranks):
            if node is not None and rank not in self.bound:
                yield rank, node

    def placed(self) -> Iterator[tuple[int, ids.NodeName]]:
        """Every rank with a node, bound or held: the gang's footprint on the fabric."""
        for rank, node in enumerate(self.ranks):
            actual = self.bound.get(rank, node)
            if actual is not None:
                yield rank, actual


class Book:
    """Every active gang's entry, with reserved GPUs per node kept current on each change.

    The book is the only mutable object here; the entries it hands out are immutable, so a
    caller (the FabricPlacement writer) can keep one while the book moves on.
    """

    def __init__(self, options: BookOptions, annotate: Callable[[Entry], Entry] | None = None) -> None:
        self.options = options
        self._entries: dict[ids.GangKey, Entry] = {}
        self._reserved: dict[ids.NodeName, int] = {}
        self.expiries = 0
        """Plans whose unbound ranks were let go (a counter, for metrics)."""
        self.annotate = annotate
        """Called on every entry put (``path_health``: the path's health); returns the entry kept."""

    # --- reading ------------------------------------------------------------------------

    def get(self, key: ids.GangKey) -> Entry | None:
        return self._entries.get(key)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def reserved_gpus(self, exclude: ids.GangKey | None = None) -> dict[ids.NodeName, int]:
        """GPUs held for gangs other than ``exclude``, per node (nodes holding none are absent)."""
        out = dict(self._reserved)
        own = self._entries.get(exclude) if exclude is not None else None
        if own is not None:
            for _, node in own.held():
                out[node] -= own.gpus_per_pod
                if out[node] <= 0:
                    del out[node]
        return out

    def reserved_in(self, topology: ids.TopologyName) -> dict[ids.NodeName, int]:
        """GPUs per node of ``topology`` held by unbound ranks (``ports.views.ReservedGpus``:
        the FabricTopology status counts them as taken)."""
        totals: dict[ids.NodeName, int] = {}
        for entry in self._entries.values():
            if entry.topology == topology:
                for _, node in entry.held():
                    totals[node] = totals.get(node, 0) + entry.gpus_per_pod
        return totals

    # --- changing -----------------------------------------------------------------------

    def put(self, entry: Entry) -> Entry:
        """Add or replace an entry (a new plan, a re-plan, or one rebuilt after a restart)."""
        old = self._entries.get(entry.key)
        if old is not None:
            self._count(old, -1)
        entry = _settle(entry)
        if self.annotate is not None:
            entry = self.annotate(entry)
        if entry.active:
            self._entries[entry.key] = entry
            self._count(entry, +1)
        else:
            self._entries.pop(entry.key, None)
        return entry

    def reserve(self, entry: Entry, now: float) -> Entry:
        """A fresh plan: held for ``reservation_ttl_s`` from ``now``; a preemptor's for its
        victims' termination too (``preempted.PreemptionHold.waiting_s``)."""
        waiting = entry.preemption.waiting_s if entry.preemption is not None else 0.0
        expires_at = now + self.options.reservation_ttl_s + waiting
        return self.put(replace(entry, expires_at=expires_at, phase=PlacementPhase.RESERVED))

    def replan(
        self, key: ids.GangKey, nodes: Mapping[int, ids.NodeName], now: float, reasons: tuple[str, ...] = ()
    ) -> Entry:
        """New nodes for unbound ranks (a planned node dropped out, or ranks expired).

        The expiry clock is not moved: only a bind extends a reservation, so a pod deleted and
        created again cannot hold its gang's GPUs forever. An expired gang's re-plan is a new
        reservation (its pods all exist: ``admission``) and starts a new clock from ``now``."""
        entry = self._entries[key]
        ranks = list(entry.ranks)
        for rank, node in nodes.items():
            if rank in entry.bound:
                raise ValueError(f"rank {rank} of {entry.display} is bound; it cannot be planned again")
            ranks[rank] = node
        return self.put(
            replace(
                entry,
                ranks=tuple(ranks),
                phase=PlacementPhase.RESERVED,
                expires_at=now + self.options.reservation_ttl_s
                if entry.phase == PlacementPhase.EXPIRED
                else entry.expires_at,
                reasons=reasons or entry.reasons,
            )
        )

    def assign(self, key: ids.GangKey, pod_uid: str, live_pods: Iterable[str]) -> int | None:
        """A rank for a pod that carries none: its earlier one, else the lowest free unbound rank.

        ``live_pods`` are the UIDs of the gang's pods that still exist; ranks of others are free.
        """
        entry = self._entries[key]
        if pod_uid in entry.pod_ranks:
            return entry.pod_ranks[pod_uid]
        live = set(live_pods)
        pod_ranks = {uid: r for uid, r in entry.pod_ranks.items() if uid in live}
        taken = set(pod_ranks.values()) | set(entry.bound)
        free = [r for r in range(entry.size) if r not in taken]
        if not free:
            return None
        # Prefer a rank that still has a node: it needs no new plan.
        rank = next((r for r in free if entry.ranks[r] is not None), free[0])
        pod_ranks[pod_uid] = rank
        self.put(replace(entry, pod_ranks=pod_ranks))
        return rank

    def set_bound(self, key: ids.GangKey, bound: Mapping[int, ids.NodeName], now: float) -> Entry | None:
        """The gang's ranks that now have a live bound pod; returns the entry when it changed.

        A newly bound rank restarts the expiry clock (the gang is making progress), never to an
        earlier expiry (a preemptor's, held while its victims terminate); a rank whose pod ended
        goes back to being held on its node for a replacement pod.
        """
        entry = self._entries.get(key)
        if entry is None or dict(entry.bound) == dict(bound):
            return None
        ranks = list(entry.ranks)
        for rank, node in bound.items():
            ranks[rank] = node  # the pod's real node wins over the plan
        progressed = any(r not in entry.bound for r in bound) or any(r not in bound for r in entry.bound)
        ttl = now + self.options.reservation_ttl_s
        expires_at = max(ttl, entry.expires_at) if progressed else entry.expires_at
        revived = progressed and entry.phase == PlacementPhase.EXPIRED
        phase = PlacementPhase.RESERVED if revived else entry.phase
        return self.put(
            replace(entry, ranks=tuple(ranks), bound=dict(bound), expires_at=expires_at, phase=phase)
        )

    def expire(self, now: float) -> list[Entry]:
        """Let go of unbound ranks of gangs past their expiry; returns the entries changed."""
        changed = []
        for entry in list(self._entries.values()):
            if entry.phase != PlacementPhase.RESERVED or entry.expires_at > now:
                continue
            ranks = tuple(node if rank in entry.bound else None for rank, node in enumerate(entry.ranks))
            reasons = (*entry.reasons, _expiry_reason(entry, self.options.reservation_ttl_s))
            expired = replace(entry, ranks=ranks, phase=PlacementPhase.EXPIRED, reasons=reasons)
            changed.append(self.put(expired))
        self.expiries += len(changed)
        return changed

    def clear_hold(self, key: ids.GangKey, now: float) -> Entry | None:
        """The last victim of the gang's preemption is gone (at ``now``): its reservation is
        held for ``reservation_ttl_s`` from now, no longer for the victims' grace period.
        Returns the entry changed (None: no such gang, or no hold waiting)."""
        entry = self._entries.get(key)
        if entry is None or entry.preemption is None or entry.preemption.cleared_at is not None:
            return None
        hold = replace(entry.preemption, cleared_at=now)
        reserved = entry.phase == PlacementPhase.RESERVED
        expires_at = now + self.options.reservation_ttl_s if reserved else entry.expires_at
        return self.put(replace(entry, preemption=hold, expires_at=expires_at))

    def release(self, key: ids.GangKey, reason: str) -> Entry | None:
        """Drop the gang's plan; returns its final (``Released``) entry, or None if unknown."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        return self.put(replace(entry, phase=PlacementPhase.RELEASED, reasons=(*entry.reasons, reason)))

    def _count(self, entry: Entry, sign: int) -> None:
        for _, node in entry.held():
            total = self._reserved.get(node, 0) + sign * entry.gpus_per_pod
            if total > 0:
                self._reserved[node] = total
            else:
                self._reserved.pop(node, None)


def _expiry_reason(entry: Entry, ttl_s: float) -> str:
    if entry.preemption is not None and entry.preemption.cleared_at is None:
        # Bounded: a victim stuck terminating (a lost node, a finalizer) cannot hold the domain.
        return ("unbound ranks released: the workloads it preempted did not end within their grace period, "
                f"{preempted.TERMINATION_MARGIN_S:g} s more and the reservation TTL ({ttl_s:g} s)")
    return f"unbound ranks released after {ttl_s:g} s"


def _settle(entry: Entry) -> Entry:
    """The phase that follows from the ranks: all bound -> Bound; a Bound gang that lost a pod
    is Reserved again (its rank waits for the replacement)."""
    if not entry.active:
        return entry
    if len(entry.bound) == entry.size:
        return replace(entry, phase=PlacementPhase.BOUND)
    if entry.phase == PlacementPhase.BOUND:
        return replace(entry, phase=PlacementPhase.RESERVED)
    return entry
