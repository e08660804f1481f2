"""The page's facts of a gang in ``fabricsched run``: its constraints and preemption, read from
the extender's book entry as its FabricPlacement shows them."""

from __future__ import annotations

from types import SimpleNamespace

from fabricsched import ids
from fabricsched.app import dashboard
from fabricsched.controller import state as cluster_state
from fabricsched.dashboard import view
from fabricsched.extender.book import preempted, reservations
from fabricsched.placement import request

T0 = 1_700_000_000.0


def test_a_book_entry_gives_its_tiers_slices_and_preemption_to_the_page() -> None:
    victim = preempted.EvictedWorkload(ids.GangKey("team/low"), "team", "low", 100, 16, ("u1", "u2"))
    entry = reservations.Entry(
        key=ids.GangKey("team/high"), namespace="team", name="high", job_uid="j", job_name="high", size=4,
        gpus_per_pod=8, topology=ids.TopologyName("ib"), tier="spine", required=True,
        ranks=tuple(ids.NodeName(n) for n in ("n0", "n1", "n2", "n3")),
        preferred_tier="leaf", slices=request.Slices(2, "leaf", True),
        slice_domains=(ids.DomainName("l0"), ids.DomainName("l1")), priority=1000,
        preemption=preempted.PreemptionHold((victim,), "spine/s0", T0, None),
        preempted_by=preempted.PreemptedRecord("team/top", 5000, "spine/s1", T0 - 60),
    )
    book = SimpleNamespace(entries=lambda: [entry])
    board = SimpleNamespace(waiting_gangs=dict)
    source = dashboard.ProcessSource(cluster_state.ClusterState(lambda: T0),
                                     SimpleNamespace(book=book, board=board))  # type: ignore[arg-type]
    (facts,) = source.snapshot().gangs
    assert (facts.tier, facts.required, facts.preferred_tier, facts.priority) == ("spine", True, "leaf", 1000)
    assert facts.slices == view.SliceFacts(2, "leaf", True, ("l0", "l1"))
    victims = (view.VictimFacts("team", "low", 100, 16),)
    assert facts.preemption == view.PreemptionFacts(victims, "spine/s0", T0)
    assert facts.preempted_by == view.PreemptedByFacts("team/top", 5000, "spine/s1", T0 - 60)
