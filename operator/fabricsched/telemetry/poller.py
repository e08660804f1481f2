"""Runs one topology's telemetry rules on an interval and hands the findings to the operator.

Flow of one round (``TopologyPoller.evaluate_once``): read the topology's current spec from the
``Sink`` -> resolve its endpoint under the operator's policy (a URL not allowed or an unreadable
credentials file stops the round before any request) -> compile its rules -> query Prometheus,
all rules at once -> ``rules.evaluate`` ->
``rules.Damper`` -> ``Sink.feed`` with every ``prometheus`` finding (in full: the tracker replaces
the source's findings) -> ``Sink.report`` when telemetry became (un)available.

Failure behaviour: a rule whose query fails keeps its previous findings (the damper is not
advanced for it), so the last known health stays; when Prometheus cannot be reached at all, the
round feeds nothing and the next one waits ``Backoff.delay``. The operator shows both as the
``TelemetryUnavailable`` condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from fabricsched.api import topology as api
from fabricsched.telemetry import access, prometheus, rules
from fabricsched.topology import health

logger = logging.getLogger(__name__)

MAX_PROBLEM_CHARS = 2048
"""Bound on the condition message: every rule failing the same way is said once."""


class QueryClient(Protocol):
    """What the poller needs of ``prometheus.PrometheusClient``."""

    def endpoint(self, prom: api.PrometheusHealthSpec) -> access.Endpoint:
        """Raises ``prometheus.TelemetryError`` (kind ``config``): nothing may be asked."""

    async def query(self, endpoint: access.Endpoint, promql: str, timeout_s: float) -> list[rules.Sample]:
        """Raises ``prometheus.TelemetryError``."""

    def forget_credentials(self) -> None:
        """Prometheus refused the credentials: read them afresh next round."""


@dataclass(frozen=True)
class Availability:
    """Whether the last round got every query answered."""

    problem: str | None
    """None: every query succeeded; else what failed, for the condition and the Event."""
    reason: str
    """CamelCase: QueriesSucceeded, PrometheusUnreachable, PrometheusUnauthorized,
    PrometheusNotAllowed, CredentialsUnavailable, QueryFailed or InvalidRule."""

    @property
    def available(self) -> bool:
        return self.problem is None


OK = Availability(None, "QueriesSucceeded")


class Sink(Protocol):
    """What the poller needs of the operator, for one topology."""

    def spec(self) -> api.FabricTopologySpec | None:
        """The current spec; None when the topology is gone (the poller then stops)."""

    def known(self) -> Collection[health.ElementId] | None:
        """Elements of the fabric (nodes, domains; no rails); None accepts every name."""

    def held(self) -> Iterable[health.Observation]:
        """The ``prometheus`` findings the tracker holds now (restored from status)."""

    def feed(self, observations: list[health.Observation]) -> None:
        """Replace every ``prometheus`` finding of the topology."""

    def report(self, availability: Availability) -> None:
        """Telemetry became available or unavailable (called on change only)."""


class TopologyPoller:
    """One topology's rounds. ``clock`` dates readings (the tracker's clock); ``sleep`` waits."""

    def __init__(self, name: str, sink: Sink, client: QueryClient, clock: Callable[[], float],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 on_failed: Callable[[str], None] | None = None) -> None:
        self.name = name
        self._on_failed = on_failed or (lambda _kind: None)
        """Told the kind of every failed query (the telemetry query failures metric)."""
        self._sink = sink
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._damper: rules.Damper | None = None
        self._compiled: tuple[api.FabricTopologySpec, list[rules.Rule]] | None = None
        self._availability: Availability | None = None
        self._warned: set[tuple[str, str]] = set()
        self.unreachable_rounds = 0
        """Consecutive rounds in which Prometheus could not be reached (drives the backoff)."""

    async def run(self) -> None:
        """Rounds until the topology is gone or no longer has ``spec.health.prometheus``."""
        while True:
            delay = await self.evaluate_once()
            if delay is None:
                return
            await self._sleep(delay)

    async def evaluate_once(self) -> float | None:
        """One round; returns the delay before the next one (None: stop)."""
        spec = self._sink.spec()
        prom = spec.health.prometheus if spec is not None else None
        if spec is None or prom is None:
            return None
        try:
            endpoint = self._client.endpoint(prom)
        except prometheus.TelemetryError as e:
            # Nothing was asked: the last known health stays, as when Prometheus is away.
            self._set_availability(Availability(e.message, e.reason or "PrometheusNotAllowed"))
            return float(prom.interval_seconds)
        compiled = self._rules(spec)
        damper = self._damper_for(prom, compiled)
        problems: list[tuple[str, str]] = []
        usable = []
        tiers = {t.name for t in spec.tiers}
        for rule in compiled:
            if rule.target == "domain" and rule.tier not in tiers:
                problems.append((rule.name, f"tier {rule.tier} is not one of spec.tiers"))
            else:
                usable.append(rule)
        now = self._clock()
        answers = await asyncio.gather(
            *(self._client.query(endpoint, r.query, float(prom.timeout_seconds)) for r in usable),
            return_exceptions=True,
        )
        rails = rules.RailMap.of(spec)
        known = self._sink.known()
        failed: list[prometheus.TelemetryError] = []
        for rule, answer in zip(usable, answers, strict=True):
            if isinstance(answer, prometheus.TelemetryError):
                failed.append(answer)
                self._on_failed(answer.kind)
                problems.append((rule.name, answer.message))
                continue
            if isinstance(answer, BaseException):
                raise answer
            evaluation = rules.evaluate(rule, answer, rails)
            readings = self._known_only(rule, evaluation, known)
            damper.observe(now, rule, readings)
        unreachable = bool(usable) and len(failed) == len(usable) and all(
            e.kind in ("unreachable", "http", "auth") for e in failed)
        refused = unreachable and any(e.kind == "auth" for e in failed)
        if refused:
            self._client.forget_credentials()
        self.unreachable_rounds = self.unreachable_rounds + 1 if unreachable else 0
        if not unreachable:
            self._sink.feed(damper.observations())
        self._set_availability(_availability(problems, unreachable, refused, bool(failed)))
        return prometheus.Backoff(float(prom.interval_seconds)).delay(self.unreachable_rounds)

    def _rules(self, spec: api.FabricTopologySpec) -> list[rules.Rule]:
        if self._compiled is None or self._compiled[0] != spec:
            self._compiled = (spec, rules.compile_rules(spec))
        return self._compiled[1]

    def _damper_for(self, prom: api.PrometheusHealthSpec, compiled: list[rules.Rule]) -> rules.Damper:
        options = rules.DampingOptions.of(prom)
        if self._damper is None:
            self._damper = rules.Damper(options)
            self._seed(self._damper, compiled)
        self._damper.options = options
        self._damper.retain(compiled)
        return self._damper

    def _seed(self, damper: rules.Damper, compiled: list[rules.Rule]) -> None:
        by_name = {r.name: r for r in compiled}
        now = self._clock()
        for obs in self._sink.held():
            rule = by_name.get(obs.rule or "")
            if obs.source == "prometheus" and rule is not None and obs.value is not None:
                damper.seed(rule, obs.element, obs.value, now)

    def _known_only(self, rule: rules.Rule, evaluation: rules.Evaluation,
                    known: Collection[health.ElementId] | None) -> dict[health.ElementId, rules.Reading]:
        readings = dict(evaluation.readings)
        strangers = []
        if known is not None:
            for element in list(readings):
                if dataclasses.replace(element, rail=None) not in known:
                    strangers.append(element.name)
                    del readings[element]
        for what, names in (("match no", evaluation.unmatched), ("name no element of the fabric", strangers)):
            if names and (rule.name, what) not in self._warned:
                self._warned.add((rule.name, what))
                logger.warning("%s: rule %s: %d samples %s (%s) and are ignored", self.name, rule.name,
                               len(names), what if what != "match no" else f"match no {rule.target_label}",
                               ", ".join(sorted(set(names))[:5]))
        return readings

    def _set_availability(self, availability: Availability) -> None:
        if availability != self._availability:
            self._availability = availability
            self._sink.report(availability)


def _availability(problems: list[tuple[str, str]], unreachable: bool, refused: bool,
                  failed: bool) -> Availability:
    if not problems:
        return OK
    text = describe(problems)
    if unreachable:
        return Availability(text, "PrometheusUnauthorized" if refused else "PrometheusUnreachable")
    return Availability(text, "QueryFailed" if failed else "InvalidRule")


def describe(problems: list[tuple[str, str]]) -> str:
    """``rule a, b: message; rule c: other``: one entry per distinct message, rule names in
    order of appearance, the whole bounded (an unreachable server is one message, not 12)."""
    by_message: dict[str, list[str]] = {}
    for rule, message in problems:
        by_message.setdefault(message, []).append(rule)
    parts = [f"rule{'s' if len(names) > 1 else ''} {', '.join(names)}: {message}"
             for message, names in by_message.items()]
    return access.clean("; ".join(parts), MAX_PROBLEM_CHARS)


class Supervisor:
    """One poller task per topology that has ``spec.health.prometheus``; ``sync`` starts and stops
    them as topologies come and go. ``start(name)`` builds the coroutine of one poller."""

    def __init__(self, start: Callable[[str], Coroutine[Any, Any, None]]) -> None:
        self._start = start
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def running(self) -> Collection[str]:
        return {n for n, t in self._tasks.items() if not t.done()}

    def sync(self, wanted: Collection[str]) -> list[str]:
        """Start pollers for ``wanted`` topologies without one; cancel the others. Returns the
        names whose poller was stopped."""
        stopped = []
        for name, task in list(self._tasks.items()):
            if name not in wanted or task.done():
                if not task.done():
                    task.cancel()
                    stopped.append(name)
                del self._tasks[name]
        for name in wanted:
            if name not in self._tasks:
                self._tasks[name] = asyncio.create_task(self._guarded(name), name=f"telemetry {name}")
        return stopped

    async def _guarded(self, name: str) -> None:
        try:
            await self._start(name)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A bug in one topology's rules must not take the operator down; the next sync restarts it.
            logger.exception("telemetry poller of %s failed", name)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
