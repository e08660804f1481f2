"""The Events the decisions give, rate-limited per gang and reason, and the answers that carry
the same message: a gang that cannot be sized, and a gang that does not fit.

The kube-scheduler retries a waiting pod several times a second; one Event per gang and reason
per ``interval_s`` says the same without flooding the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fabricsched import ids
from fabricsched.extender.book import sink
from fabricsched.extender.decide import verdicts
from fabricsched.extender.decide.answers import FilterAnswer
from fabricsched.placement import request
from fabricsched.topology import nodes


class Notices:
    def __init__(self, events: sink.EventSink, clock: Callable[[], float], interval_s: float) -> None:
        self.events = events
        self.clock = clock
        self.interval_s = interval_s
        self._last: dict[tuple[ids.GangKey, str], float] = {}

    def pod(self, pod: nodes.PodUsage, key: ids.GangKey, reason: str, message: str, warning: bool) -> None:
        """An Event on ``pod``, unless gang ``key`` had one with ``reason`` within the interval."""
        now = self.clock()
        last = self._last.get((key, reason))
        if last is not None and now - last < self.interval_s:
            return
        self._last[(key, reason)] = now
        self.events.pod_event(pod, reason, message, warning)

    def prune(self) -> None:
        """Forget what is older than the interval (housekeeping): the memory stays bounded."""
        cutoff = self.clock() - self.interval_s
        self._last = {k: t for k, t in self._last.items() if t > cutoff}

    def unresolved(
        self, pod: nodes.PodUsage, key: ids.GangKey, reason: str, node_names: Sequence[str]
    ) -> FilterAnswer:
        """A known gang that cannot be sized (or mixes GPU requests): never a lone pod."""
        message = f"gang not identified: {reason}"
        self.pod(pod, key, "GangUnresolved", message, True)
        return FilterAnswer([], failed=verdicts.every(node_names, message))

    def no_fit(
        self, pod: nodes.PodUsage, key: ids.GangKey, display: str, tier: str | None, required: bool,
        why: request.NoFit, candidates: Sequence[str],
    ) -> FilterAnswer:
        """The answer for a gang the engine cannot place: unresolvable when no change of free
        capacity can help (a required tier no domain can hold, a gang larger than the fabric)."""
        if required or why.unresolvable:
            where = f"one {tier} domain" if required and tier else "this fabric"
            message = f"gang {display} cannot be placed in {where}: {why.reason}"
            self.pod(pod, key, "FabricTierUnsatisfiable" if required else "FabricUnplaceable", message, True)
            return FilterAnswer([], unresolvable=verdicts.every(candidates, message))
        message = f"gang {display} does not fit now: {why.reason}"
        self.pod(pod, key, "FabricNoFit", message, True)
        return FilterAnswer([], failed=verdicts.every(candidates, message))
