"""What a preemption leaves in the book: on the preemptor's entry, the victims it evicted and
whether they are gone yet (its hold does not expire before); on a victim's, who preempted it.

Pure records; ``objects`` writes them to the FabricPlacement status and reads them back, so a
restart (or the other replica) resumes the hold with no second round.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricsched import ids

TERMINATION_MARGIN_S = 30.0
"""Beyond its victims' longest grace period, how long a preemptor's hold waits for them to be
gone (a kubelet reports a pod's end, and the API server removes it, a little after the grace
period). Past it the reservation expires as any other does: the hold is bounded."""


@dataclass(frozen=True)
class EvictedWorkload:
    """One victim: a whole gang, or a single pod."""

    key: ids.GangKey
    namespace: str
    name: str
    priority: int
    gpus: int
    pod_uids: tuple[str, ...]
    """The pods evicted: the hold's expiry clock starts once none of them is left."""


@dataclass(frozen=True)
class PreemptionHold:
    """The preemptor's record: what it evicted, where, and when the last victim was gone."""

    victims: tuple[EvictedWorkload, ...]
    domain: str
    """``tier/name`` of the domain cleared (``fabric`` for the whole fabric)."""
    at: float
    cleared_at: float | None = None
    """When the last victim pod was gone; None while one still terminates."""
    grace_s: float = 0.0
    """The victims' longest termination grace period when they were evicted. Not on the object:
    the reservation's ``expiresAt`` carries the bound it sets (``waiting_s``) across a restart."""

    @property
    def waiting_s(self) -> float:
        """How much longer than a plain reservation the preemptor's is held while its victims
        terminate: their grace period and a margin (0 once they are gone)."""
        return self.grace_s + TERMINATION_MARGIN_S if self.cleared_at is None else 0.0

    @property
    def pod_uids(self) -> frozenset[str]:
        return frozenset(uid for v in self.victims for uid in v.pod_uids)


@dataclass(frozen=True)
class PreemptedRecord:
    """On a victim's entry: who preempted it (kept by its next plan too)."""

    preemptor: str
    """``namespace/name`` of the preempting gang."""
    priority: int
    domain: str
    at: float

    def sentence(self) -> str:
        return (f"preempted by gang {self.preemptor} (priority {self.priority}) to clear {self.domain}")
