"""Telemetry rules, pure: query results -> per-element readings -> damped health findings.

Flow, once per evaluation interval (``poller`` does the I/O around it):
``Rule`` + the query's ``Sample`` list -> ``evaluate`` -> one ``Reading`` per element (the worst
sample wins) -> ``Damper.observe`` (consecutive-evaluation and flap damping, per rule and
element) -> ``Damper.observations`` -> ``topology.health.Observation`` with source
``prometheus``, fed to the ``HealthTracker`` in full (its hysteresis does the recovery wait).

Damping, per (rule, element): the rule must fire on ``degrade_after`` consecutive evaluations
before the element counts as unhealthy, so one noisy scrape moves nothing; an element whose
verdict changed ``flap_changes`` times within ``flap_window_s`` is *flapping* and stays
unhealthy while it flaps, even between bad readings and even if no streak reached
``degrade_after`` (a link bouncing every other scrape is the worst kind of link). Recovery is not
damped here: the finding disappears and the tracker waits ``recoverAfterSeconds``.

No I/O and no clock: time is a parameter.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from fabricsched.api import topology as api
from fabricsched.telemetry import defaults
from fabricsched.topology import fabric, health, rails

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "==": operator.eq, "!=": operator.ne,
}


@dataclass(frozen=True)
class Sample:
    """One element of an instant query's result vector."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Rule:
    """A validated ``api.TelemetryRule``, with its regex compiled and its state typed."""

    name: str
    query: str
    target: Literal["node", "domain"]
    target_label: str
    target_regex: re.Pattern[str] | None
    tier: str | None
    comparison: api.Comparison
    threshold: float
    state: fabric.HealthState
    capacity: float | None
    """Fixed capacity of a degraded element; None = the spec's degradedCapacity."""
    capacity_from_value: bool
    rail_label: str | None

    @classmethod
    def from_api(cls, rule: api.TelemetryRule) -> Rule:
        return cls(
            name=rule.name,
            query=rule.query,
            target=rule.target,
            target_label=rule.target_label,
            target_regex=re.compile(rule.target_regex) if rule.target_regex is not None else None,
            tier=rule.tier,
            comparison=rule.comparison,
            threshold=rule.threshold,
            state=fabric.HealthState(rule.state),
            capacity=rule.capacity,
            capacity_from_value=rule.capacity_from_value,
            rail_label=rule.rail_label,
        )

    def fires(self, value: float) -> bool:
        return _COMPARE[self.comparison](value, self.threshold)

    def target_name(self, labels: Mapping[str, str]) -> str | None:
        """The element name a sample's labels give (None: label absent or regex does not match).

        The regex must match the whole value, like Prometheus relabelling; the first capture
        group is the name when there is one, else the whole value.
        """
        raw = labels.get(self.target_label)
        if not raw:
            return None
        if self.target_regex is None:
            return raw
        match = self.target_regex.fullmatch(raw)
        if match is None:
            return None
        name = match.group(1) if self.target_regex.groups else match.group(0)
        return name or None


def compile_rules(spec: api.FabricTopologySpec) -> list[Rule]:
    """The rules of a topology: the default ones (when enabled), then the spec's own.

    A spec rule with the name of a default rule replaces it, so an admin can retune one
    default (a threshold, a window) without switching the others off.
    """
    prom = spec.health.prometheus
    if prom is None:
        return []
    mine = {r.name: r for r in prom.rules}
    out = []
    if prom.default_rules.enabled:
        builtin = defaults.default_rules(spec, prom.default_rules)
        out = [Rule.from_api(r) for r in builtin if r.name not in mine]
    return out + [Rule.from_api(r) for r in prom.rules]


# --- evaluation -------------------------------------------------------------------------------


RailMap = rails.RailMap
"""Re-exported: rules map their rail label through the topology's one rail map."""


@dataclass(frozen=True)
class Reading:
    """One rule's verdict on one element at one evaluation."""

    element: health.ElementId
    value: float
    fires: bool
    detail: str = ""
    """Which sample decided it, e.g. ``device mlx5_2``: evidence for status and Events."""


@dataclass(frozen=True)
class Evaluation:
    readings: Mapping[health.ElementId, Reading]
    unmatched: tuple[str, ...] = ()
    """Target label values that named no element (regex mismatch, label absent), for diagnosis."""


_NO_RAILS = RailMap()


def evaluate(rule: Rule, samples: Iterable[Sample], rails: RailMap = _NO_RAILS) -> Evaluation:
    """One reading per element named by the samples; when several samples name one element
    (ports of one host, rails without a rail map), the one that fires worst decides."""
    readings: dict[health.ElementId, Reading] = {}
    unmatched: list[str] = []
    for sample in samples:
        if math.isnan(sample.value):
            continue  # no reading (e.g. 0/0): neither good nor bad
        name = rule.target_name(sample.labels)
        if name is None:
            unmatched.append(sample.labels.get(rule.target_label, f"<no {rule.target_label} label>"))
            continue
        rail_value = sample.labels.get(rule.rail_label) if rule.rail_label else None
        rail = rails.rail(rail_value)
        if rail is False:
            continue
        if rule.target == "node":
            element = health.ElementId.node(name, rail)
        else:
            assert rule.tier is not None  # enforced by the API model
            element = health.ElementId.domain(rule.tier, name, rail)
        detail = f"{rule.rail_label} {rail_value}" if rule.rail_label and rail_value else ""
        reading = Reading(element, sample.value, rule.fires(sample.value), detail)
        previous = readings.get(element)
        if previous is None or _worse(rule, reading, previous):
            readings[element] = reading
    return Evaluation(readings, tuple(unmatched))


def _worse(rule: Rule, a: Reading, b: Reading) -> bool:
    if a.fires != b.fires:
        return a.fires
    if rule.capacity_from_value or rule.comparison in ("<", "<="):
        return a.value < b.value
    if rule.comparison in (">", ">="):
        return a.value > b.value
    return False  # == and !=: the first sample stands


def capacity_of(rule: Rule, value: float) -> float | None:
    """The capacity a firing reading gives: fixed, the value clamped to 0..1, or unknown (None)."""
    if rule.state is fabric.HealthState.DOWN:
        return 0.0
    if rule.capacity_from_value:
        return min(1.0, max(0.0, value)) if not math.isnan(value) else None
    return rule.capacity


# --- damping ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DampingOptions:
    degrade_after: int = 2
    """Consecutive firing evaluations before an element counts as unhealthy."""
    flap_changes: int = 3
    """Verdict changes within ``flap_window_s`` that make an element flapping."""
    flap_window_s: float = 600.0

    @classmethod
    def of(cls, prom: api.PrometheusHealthSpec) -> DampingOptions:
        return cls(prom.degrade_after, prom.flap_changes, float(prom.flap_window_seconds))


@dataclass(frozen=True)
class _Track:
    """What the damper remembers of one (rule, element)."""

    fires: bool = False
    streak: int = 0
    changes: tuple[float, ...] = ()
    """Times the verdict changed, within the flap window."""
    last_bad: Reading | None = None
    """The latest firing reading: its value is the evidence while the element is held."""
    asserted: bool = False
    flapping: bool = False


class Damper:
    """Per (rule, element) damping state of one topology. Mutable; time is a parameter."""

    def __init__(self, options: DampingOptions) -> None:
        self.options = options
        self._tracks: dict[str, dict[health.ElementId, _Track]] = {}
        self._rules: dict[str, Rule] = {}

    def observe(self, now: float, rule: Rule, readings: Mapping[health.ElementId, Reading]) -> None:
        """One evaluation of ``rule``: ``readings`` holds every element it has a sample for;
        an element without one reads good (no evidence; its series may be gone)."""
        self._rules[rule.name] = rule
        tracks = self._tracks.setdefault(rule.name, {})
        horizon = now - self.options.flap_window_s
        for element in set(tracks) | set(readings):
            reading = readings.get(element)
            fires = reading is not None and reading.fires
            old = tracks.get(element, _Track())
            changes = tuple(t for t in old.changes if t > horizon)
            if fires != old.fires:
                changes += (now,)
            streak = old.streak + 1 if fires else 0
            flapping = len(changes) >= self.options.flap_changes
            asserted = streak >= self.options.degrade_after or flapping
            last_bad = reading if fires else old.last_bad
            track = _Track(fires, streak, changes, last_bad, asserted, flapping)
            if not fires and not asserted and not changes:
                tracks.pop(element, None)  # nothing to remember
            else:
                tracks[element] = track

    def seed(self, rule: Rule, element: health.ElementId, value: float, now: float) -> None:
        """Resume an element a previous operator held unhealthy by ``rule`` (from status): it stays
        held until a good reading, instead of waiting ``degrade_after`` evaluations again."""
        self._rules[rule.name] = rule
        reading = Reading(element, value, True)
        tracks = self._tracks.setdefault(rule.name, {})
        tracks[element] = _Track(True, self.options.degrade_after, (now,), reading, True, False)

    def retain(self, rules: Sequence[Rule]) -> None:
        """Forget rules no longer configured (their findings disappear)."""
        keep = {r.name for r in rules}
        for name in set(self._tracks) - keep:
            del self._tracks[name]
            self._rules.pop(name, None)

    def observations(self) -> list[health.Observation]:
        """The ``prometheus`` findings now: one per (rule, element) held unhealthy."""
        found = []
        for name in sorted(self._tracks):
            rule = self._rules[name]
            for element, track in sorted(self._tracks[name].items()):
                if track.asserted and track.last_bad is not None:
                    found.append(self._observation(rule, element, track))
        return found

    def _observation(self, rule: Rule, element: health.ElementId, track: _Track) -> health.Observation:
        assert track.last_bad is not None
        value = track.last_bad.value
        reason = f"prometheus rule {rule.name}: {value:g} {rule.comparison} {rule.threshold:g}"
        if track.last_bad.detail:
            reason += f" ({track.last_bad.detail})"
        if track.flapping:
            reason += (f"; flapping: {len(track.changes)} changes in "
                       f"{self.options.flap_window_s:g}s")
        return health.Observation(element, rule.state, capacity_of(rule, value), "prometheus", reason,
                                  rule=rule.name, value=value)
