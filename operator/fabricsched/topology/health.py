"""Health of fabric elements: observations from every source, merged, with hysteresis.

Flow: sources (node conditions and labels, ``spec.links``, Prometheus rules, simulator events)
-> ``Observation`` lists -> ``HealthTracker.update`` -> the effective view (one
``ElementHealth`` per element that is not healthy) and ``HealthChange`` records for Events.

Hysteresis (docs/design.md): worse applies at once; better from an observed source applies only
after ``recover_after_s`` without a new worsening, which restarts the wait; ``spec.links`` is an
admin statement and applies at once both ways. The tracker therefore keeps two layers per
element: the *held* state of the observed sources (which lags on the way up) and the raw
``spec.links`` findings (which never lag); the effective state is the worse of the two.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from fabricsched import parsing
from fabricsched.api import topology as api
from fabricsched.topology import fabric, nodes, nvsentinel, rails

Source = Literal["spec.links", "condition", "label", "prometheus", "dra", "event"]
OBSERVED_SOURCES: frozenset[str] = frozenset({"condition", "label", "prometheus", "dra", "event"})
"""Sources whose improvements wait out ``recover_after_s``; ``spec.links`` is the only other."""


@functools.total_ordering
@dataclass(frozen=True)
class ElementId:
    """A node (its fabric access links) or a domain (that switch group's uplinks)."""

    kind: Literal["node", "domain"]
    name: str
    """Node name, or the domain's name (the tier label value)."""
    tier: str | None = None
    """Tier *name* of a domain; None for nodes."""
    rail: int | None = None
    """One rail of a rail-optimized fabric; None = the whole element."""

    @classmethod
    def node(cls, name: str, rail: int | None = None) -> ElementId:
        return cls("node", name, None, rail)

    @classmethod
    def domain(cls, tier: str, name: str, rail: int | None = None) -> ElementId:
        return cls("domain", name, tier, rail)

    def _key(self) -> tuple[str, str, str, int]:
        # The whole element (rail None) sorts before its rails: tuples of None and int do not compare.
        return (self.kind, self.name, self.tier or "", -1 if self.rail is None else self.rail)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ElementId):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        base = f"node {self.name}" if self.kind == "node" else f"domain {self.tier}/{self.name}"
        return base if self.rail is None else f"{base} rail {self.rail}"


@dataclass(frozen=True)
class Observation:
    """One source's finding about one element."""

    element: ElementId
    state: fabric.HealthState
    capacity: float | None
    """Measured capacity fraction; None = unknown (degraded -> the spec's degradedCapacity)."""
    source: Source
    reason: str
    rule: str | None = None
    """Prometheus rule name, when ``source`` is prometheus."""
    value: float | None = None
    """The measured value that triggered the rule."""


@dataclass(frozen=True)
class ElementHealth:
    """The effective health of one element (the merged view, after hysteresis)."""

    element: ElementId
    state: fabric.HealthState
    capacity: float
    since: float | None
    """When the element entered its current state."""
    recovering_since: float | None
    """Start of the wait before observed sources' improvement applies; None when not waiting."""
    sources: tuple[Observation, ...]
    """Every finding that holds the element where it is (held observed ones, then spec.links)."""


ChangeKind = Literal["down", "degraded", "recovered", "capacity", "recovering", "relapsed"]


@dataclass(frozen=True)
class HealthChange:
    """A change of an element's effective record, for Events and status writes.

    kind: ``down``/``degraded``/``recovered`` when the state changed (named by the new state),
    ``capacity`` when only the capacity did, ``recovering`` when a recovery wait started or was
    restarted, ``relapsed`` when a wait was cancelled by a worsening back to the held level.
    """

    element: ElementId
    kind: ChangeKind
    old: fabric.HealthState
    new: fabric.HealthState
    old_capacity: float
    new_capacity: float
    at: float

    @property
    def worsened(self) -> bool:
        """A worse state, or less capacity."""
        return fabric.severity(self.new) > fabric.severity(self.old) or self.new_capacity < self.old_capacity
    sources: tuple[Observation, ...] = ()

    @property
    def message(self) -> str:
        text = f"{self.element}: {self.old.value} -> {self.new.value}"
        if self.new_capacity != self.old_capacity or self.new is fabric.HealthState.DEGRADED:
            text += f" (capacity {self.old_capacity:.2f} -> {self.new_capacity:.2f})"
        if self.kind in ("recovering", "relapsed"):
            text = f"{self.element}: {self.kind} while {self.new.value}"
        reasons = "; ".join(f"{o.source}: {o.reason}" for o in self.sources if o.reason)
        return f"{text}: {reasons}" if reasons else text


REASON_BYTES = 300
"""Bound on a node condition's reason (the status shows it, Events repeat it)."""
MAX_FINDINGS_KEPT = 8
"""Findings an element's record keeps per layer (observed, spec.links), the worst first."""

_Level = tuple[fabric.HealthState, float]
_HEALTHY: _Level = (fabric.HealthState.HEALTHY, 1.0)


def _worse(a: _Level, b: _Level) -> bool:
    """a is strictly worse than b: a worse state, or the same state at lower capacity."""
    if a[0] is not b[0]:
        return fabric.severity(a[0]) > fabric.severity(b[0])
    return a[1] < b[1]


def _worst(a: _Level, b: _Level) -> _Level:
    state = a[0] if fabric.severity(a[0]) >= fabric.severity(b[0]) else b[0]
    return (state, min(a[1], b[1]))


@dataclass(frozen=True)
class _Held:
    """The observed sources' layer of one element, as it currently applies."""

    level: _Level
    sources: tuple[Observation, ...]
    recovering_since: float | None
    raw: _Level
    """The observed sources' latest raw level: a worsening relative to it restarts the wait."""


class HealthTracker:
    """Merged, hysteretic health of one FabricTopology's elements.

    Mutable and incremental: one element's update costs O(sources of that element). Time is a
    parameter everywhere (the core reads no clock).
    """

    def __init__(self, recover_after_s: float, degraded_capacity: float) -> None:
        self.recover_after_s = recover_after_s
        self.degraded_capacity = degraded_capacity
        self._findings: dict[str, dict[ElementId, tuple[Observation, ...]]] = {}
        self._held: dict[ElementId, _Held] = {}
        self._waiting: set[ElementId] = set()
        self._effective: dict[ElementId, ElementHealth] = {}
        self._restored: dict[ElementId, set[str]] = {}
        self.generation = 0
        """Incremented whenever the effective view changes in any way (sources included)."""

    # -- inputs ---------------------------------------------------------------------------

    def update(
        self,
        now: float,
        source: Source,
        observations: Iterable[Observation],
        scope: Collection[ElementId] | None = None,
    ) -> list[HealthChange]:
        """Replace ``source``'s findings (all of them, or only those about ``scope``).

        ``scope`` lets the operator feed one node's conditions in O(1) instead of resending
        every finding of the source; elements absent from ``observations`` have no finding.
        Recoveries that fell due by ``now`` are applied too, so the view is consistent at ``now``.
        """
        grouped: dict[ElementId, list[Observation]] = {}
        for obs in observations:
            if obs.source != source:
                raise ValueError(f"observation from {obs.source!r} fed as {source!r}: {obs}")
            grouped.setdefault(obs.element, []).append(obs)
        table = self._findings.setdefault(source, {})
        touched: set[ElementId] = set(grouped)
        if scope is None:
            touched.update(table)
            table.clear()
            touched.update(e for e, srcs in self._restored.items() if source in srcs)
            for srcs in self._restored.values():
                srcs.discard(source)
        else:
            for element in scope:
                table.pop(element, None)
            touched.update(scope)
        for element, found in grouped.items():
            table[element] = tuple(found)
        touched.update(e for e in self._waiting if self._due(e, now))
        return self._reconcile_all(touched, now)

    def holds(self, source: Source, elements: Iterable[ElementId]) -> bool:
        """``source`` has a finding about one of ``elements`` (an empty scoped update of a source
        that holds none would change nothing: callers on the hot path skip it)."""
        table = self._findings.get(source)
        return table is not None and any(e in table for e in elements)

    def tick(self, now: float) -> list[HealthChange]:
        """Apply the recoveries whose wait has passed by ``now``."""
        return self._reconcile_all({e for e in self._waiting if self._due(e, now)}, now)

    def restore(self, records: Iterable[ElementHealth]) -> None:
        """Resume from records a previous operator wrote to status (``since``, ``recoveringSince``).

        Call before the first ``update``, then feed every source once in full. Status keeps one
        merged level per element, so a restored element's observed layer starts at that level:
        at worst it waits out one more recovery period than strictly needed, it never recovers
        early.
        """
        for record in records:
            observed = tuple(o for o in record.sources if o.source in OBSERVED_SOURCES)
            level: _Level = (record.state, record.capacity)
            if observed:
                self._held[record.element] = _Held(level, observed, record.recovering_since, level)
                if record.recovering_since is not None:
                    self._waiting.add(record.element)
            self._effective[record.element] = record
            self._restored[record.element] = {o.source for o in record.sources}
        self.generation += 1

    def forget(self, elements: Iterable[ElementId]) -> None:
        """Drop elements that left the fabric (a deleted node): no recovery wait, no change record."""
        for element in elements:
            for table in self._findings.values():
                table.pop(element, None)
            self._held.pop(element, None)
            self._waiting.discard(element)
            self._restored.pop(element, None)
            if self._effective.pop(element, None) is not None:
                self.generation += 1

    # -- outputs --------------------------------------------------------------------------

    def effective(self) -> Mapping[ElementId, ElementHealth]:
        """Every element that is not healthy (or waits out a recovery): a read-only live view."""
        return types.MappingProxyType(self._effective)

    def get(self, element: ElementId) -> ElementHealth | None:
        return self._effective.get(element)

    def next_due(self) -> float | None:
        """Earliest time a pending recovery applies (when the operator should ``tick``)."""
        starts = [h.recovering_since for e in self._waiting if (h := self._held.get(e))
                  and h.recovering_since is not None]
        return min(starts) + self.recover_after_s if starts else None

    # -- internals ------------------------------------------------------------------------

    def _due(self, element: ElementId, now: float) -> bool:
        held = self._held.get(element)
        return bool(held and held.recovering_since is not None
                    and now - held.recovering_since >= self.recover_after_s)

    def _reconcile_all(self, elements: Iterable[ElementId], now: float) -> list[HealthChange]:
        changes = []
        for element in sorted(elements):
            change = self._reconcile(element, now)
            if change is not None:
                changes.append(change)
        return changes

    def _merge(self, element: ElementId, sources: Iterable[str]) -> tuple[_Level, tuple[Observation, ...]]:
        level = _HEALTHY
        found: list[Observation] = []
        for source in sources:
            for obs in self._findings.get(source, {}).get(element, ()):
                if obs.state is fabric.HealthState.HEALTHY:
                    continue
                found.append(obs)
                level = _worst(level, (obs.state, self._capacity(obs)))
        # The level reads every finding; the record keeps the worst few (stable: source order within a
        # state), so a node with hundreds of conditions or rules firing cannot grow the status.
        found.sort(key=lambda o: -fabric.severity(o.state))
        return level, tuple(found[:MAX_FINDINGS_KEPT])

    def _capacity(self, obs: Observation) -> float:
        if obs.state is fabric.HealthState.DOWN:
            return 0.0
        cap = self.degraded_capacity if obs.capacity is None else obs.capacity
        return min(1.0, max(0.0, cap))

    def _hold(self, element: ElementId, now: float) -> _Held | None:
        """The observed layer after this update: worse or equal at once, better after the wait."""
        raw, found = self._merge(element, sorted(OBSERVED_SOURCES))
        held = self._held.get(element)
        current = held.level if held else _HEALTHY
        if not _worse(current, raw):
            return None if raw == _HEALTHY else _Held(raw, found, None, raw)
        assert held is not None  # current is worse than raw, so something is held
        start = held.recovering_since
        if start is None or _worse(raw, held.raw):
            start = now
        if now - start >= self.recover_after_s:
            return None if raw == _HEALTHY else _Held(raw, found, None, raw)
        return dataclasses.replace(held, recovering_since=start, raw=raw)

    def _reconcile(self, element: ElementId, now: float) -> HealthChange | None:
        held = self._hold(element, now)
        if held is None:
            self._held.pop(element, None)
            self._waiting.discard(element)
        else:
            self._held[element] = held
            if held.recovering_since is None:
                self._waiting.discard(element)
            else:
                self._waiting.add(element)
        links_level, links_found = self._merge(element, ("spec.links",))
        level = _worst(held.level if held else _HEALTHY, links_level)
        sources = (held.sources if held else ()) + links_found
        recovering = held.recovering_since if held else None
        old = self._effective.get(element)
        old_level: _Level = (old.state, old.capacity) if old else _HEALTHY
        old_recovering = old.recovering_since if old else None
        since = old.since if old and old.state is level[0] else now
        if level == _HEALTHY and recovering is None:
            self._effective.pop(element, None)
            self._restored.pop(element, None)
        else:
            record = ElementHealth(element, level[0], level[1], since, recovering, sources)
            if record != old:
                self.generation += 1
            self._effective[element] = record
        if old is not None and element not in self._effective:
            self.generation += 1
        return _change(element, old_level, level, old_recovering, recovering, now, sources)


_STATE_KIND: dict[fabric.HealthState, ChangeKind] = {
    fabric.HealthState.HEALTHY: "recovered",
    fabric.HealthState.DEGRADED: "degraded",
    fabric.HealthState.DOWN: "down",
}


def _change(element: ElementId, old: _Level, new: _Level, old_recovering: float | None,
            recovering: float | None, now: float, sources: tuple[Observation, ...]) -> HealthChange | None:
    kind: ChangeKind
    if old[0] is not new[0]:
        kind = _STATE_KIND[new[0]]
    elif old[1] != new[1]:
        kind = "capacity"
    elif recovering != old_recovering:
        kind = "relapsed" if recovering is None else "recovering"
    else:
        return None
    return HealthChange(element, kind, old[0], new[0], old[1], new[1], now, sources)


# -- pure sources ----------------------------------------------------------------------------


def observations_from_node(spec: api.FabricTopologySpec, node: nodes.NodeInfo) -> list[Observation]:
    """Findings of the ``condition`` and ``label`` sources about one node (healthy -> none)."""
    element = ElementId.node(node.name)
    found: list[Observation] = []
    presets = spec.health.condition_presets
    for ctype in spec.health.node_conditions:
        cond = node.conditions.get(ctype)
        if cond is not None and cond.status == "True" and not nvsentinel.handles(ctype, presets):
            # A condition's message is any text its writer chose: bounded, printable.
            reason = parsing.printable(f"{ctype}: {cond.message or cond.reason}".rstrip(": "), REASON_BYTES)
            found.append(Observation(element, fabric.HealthState.DEGRADED, None, "condition", reason))
    if presets:
        found += _preset_observations(spec, node)
    label = node.labels.get(api.HEALTH_LABEL, "").strip().lower()
    if label in (fabric.HealthState.DEGRADED.value, fabric.HealthState.DOWN.value):
        found.append(Observation(element, fabric.HealthState(label), None, "label",
                                 f"{api.HEALTH_LABEL}={label}"))
    return found


def _preset_observations(spec: api.FabricTopologySpec, node: nodes.NodeInfo) -> list[Observation]:
    """Findings of the condition families of ``spec.health.conditionPresets`` (per NIC)."""
    found: list[Observation] = []
    presets = spec.health.condition_presets
    for ctype in nvsentinel.CHECK_STATES:
        cond = node.conditions.get(ctype)
        if cond is None or cond.status != "True" or not nvsentinel.handles(ctype, presets):
            continue
        for finding in nvsentinel.findings(ctype, cond.message, rails.RailMap.of(spec)):
            found.append(Observation(ElementId.node(node.name, finding.rail), finding.state, None,
                                     "condition", finding.reason))
    return found


def node_elements(name: str, rail_count: int) -> tuple[ElementId, ...]:
    """Every element a node's own sources may report: the host, and each of its rails."""
    whole = ElementId("node", name)
    if rail_count <= 1:
        return (whole,)
    return (whole, *(ElementId("node", name, None, r) for r in range(rail_count)))


def observations_from_links(spec: api.FabricTopologySpec) -> list[Observation]:
    """The admin's ``spec.links`` overrides as ``spec.links`` findings (healthy entries included;
    the tracker treats them as no finding)."""
    return [
        Observation(
            ElementId.domain(link.tier, link.domain, link.rail),
            fabric.HealthState(link.state.value),
            link.capacity,
            "spec.links",
            link.reason,
        )
        for link in spec.links
    ]
