"""The fabric page's view of one ``fabricsched run`` process: the operator's snapshots and
health, the extender's book, path index and Pending board, read in memory (``view.PageSource``).

``version`` is what every page request pays: the state's generation, the path index's version,
the book's entries (immutable objects: a moved plan is a new object) and the Pending board's
records. Only when it moved does ``snapshot`` walk them.
"""

from __future__ import annotations

from collections.abc import Hashable

from fabricsched import gangs
from fabricsched.controller import state as cluster_state
from fabricsched.dashboard import view
from fabricsched.extender import service
from fabricsched.extender.book import objects, preempted


class ProcessSource:
    def __init__(self, state: cluster_state.ClusterState, extender: service.Service) -> None:
        self.state = state
        self.extender = extender
        """The extender: its book, path index and Pending board."""

    def version(self) -> Hashable:
        board = self.extender.board
        return (
            self.state.generation,
            self.extender.gangs_on_path.version,
            tuple(self.extender.book.entries()),
            tuple(board.waiting_gangs().items()),
        )

    def snapshot(self) -> view.PageSnapshot:
        return view.PageSnapshot(self._fabrics(), self._gangs(), self._pending())

    def _fabrics(self) -> list[view.FabricFacts]:
        found = []
        for name, topology in self.state.topologies.items():
            snap = self.state.snapshot(name)
            if snap is None:
                continue
            found.append(view.FabricFacts(
                name, snap.fabric, snap.free_gpus, self.extender.book.reserved_in(name), topology.health()
            ))
        return found

    def _gangs(self) -> list[view.GangFacts]:
        return [
            view.GangFacts(
                key=e.key, namespace=e.namespace, name=e.name, topology=e.topology, phase=e.phase.value,
                size=e.size, gpus_per_pod=e.gpus_per_pod, tier=e.tier, required=e.required,
                hosts=tuple(node for _, node in e.placed()), slowdown=e.comm_slowdown,
                slowdown_at_placement=e.comm_slowdown_at_placement or e.comm_slowdown,
                degraded_path=e.degraded_path, placement=objects.object_name(e),
                preferred_tier=e.preferred_tier, priority=e.priority, traffic=e.pattern.value,
                slices=None if e.slices is None else view.SliceFacts(
                    e.slices.pods, e.slices.tier, e.slices.required, tuple(e.slice_domains)),
                preemption=_preemption(e.preemption), preempted_by=_preempted_by(e.preempted_by),
            )
            for e in self.extender.book.entries()
            if e.active
        ]

    def _pending(self) -> list[view.PendingFacts]:
        board = self.extender.board
        waiting = board.waiting_gangs()
        if not waiting:
            return []
        # The board remembers a gang until it is planned: show only gangs with a live pod waiting.
        live = {
            self.extender.key_of(p)  # the process's one gang key
            for p in self.state.unbound_pods.values()
            if not gangs.pod_ended(p)
        }
        found = []
        for key, (reason, message, _) in sorted(waiting.items()):
            if key not in live:
                continue
            ref = gangs.GangRef.parse(key)
            found.append(view.PendingFacts(
                key, ref.namespace, ref.name, None, reason, message, board.since.get(key)
            ))
        return found


def _preemption(hold: preempted.PreemptionHold | None) -> view.PreemptionFacts | None:
    if hold is None:
        return None
    victims = tuple(view.VictimFacts(v.namespace, v.name, v.priority, v.gpus) for v in hold.victims)
    return view.PreemptionFacts(victims, hold.domain, hold.at, hold.cleared_at)


def _preempted_by(record: preempted.PreemptedRecord | None) -> view.PreemptedByFacts | None:
    if record is None:
        return None
    return view.PreemptedByFacts(record.preemptor, record.priority, record.domain, record.at)


def source(state: cluster_state.ClusterState, extender: service.Service) -> view.PageSource:
    return ProcessSource(state, extender)



