"""The API calls of preemption (``decide.preemption_options.PreemptionCalls``): evictions through the
Eviction API (policy/v1), so the API server enforces the budgets too (a 429 when one refuses);
and a namespace's PodDisruptionBudgets and labels read at the decision, which is what
``disruptions.FollowedDisruptions`` falls back to while its watches are not current (before their
first listing, or without the RBAC to watch).

Each call is one request in a worker thread, bounded in time, through ``ports.errors.call``. The
parsing of a budget (``budget_of``) is the one the watch uses too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic
from kubernetes import client

from fabricsched import parsing
from fabricsched.api import topology as api_topology
from fabricsched.extender.decide import budgets
from fabricsched.ports import errors
from fabricsched.topology import selectors

logger = logging.getLogger(__name__)
Budget = budgets.Budget

NAMESPACE_TTL_S = 30.0
"""How long a namespace's labels read from the API are kept (the opt-out label changes rarely)."""
MAX_BUDGETS = 1000
"""Most budgets kept for one namespace; a namespace with more has every workload protected."""
MORE_BUDGETS = f"(more than {MAX_BUDGETS} budgets)"
"""The name of the budget that stands for those not kept (no object can be named so)."""
MAX_SELECTOR_TERMS = 64
"""Most requirements (matchLabels entries and matchExpressions) of a budget's selector read."""
MAX_SELECTOR_VALUES = 256
"""Most values over all of a selector's requirements; a longer selector covers every pod."""
MAX_NAME = 253
MAX_LABEL_KEY = 317
"""A label key: a DNS prefix (253), ``/`` and a name (63)."""
MAX_LABEL_VALUE = 63


class ApiPreemptionCalls:
    def __init__(self, api_client: client.ApiClient, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._core = client.CoreV1Api(api_client)
        self._policy = client.PolicyV1Api(api_client)
        self._timeout_s = timeout_s
        self._clock = clock
        self._labels: dict[str, tuple[float, Mapping[str, str]]] = {}
        self.api_waited_s = 0.0
        """Seconds spent in the API reads of ``budgets`` and ``namespace_labels`` so far."""

    async def budgets(self, namespace: str) -> Sequence[budgets.Budget]:
        asked = time.perf_counter()
        try:
            listed: Any = await asyncio.to_thread(
                errors.call, self._policy.list_namespaced_pod_disruption_budget, namespace,
                limit=MAX_BUDGETS, _request_timeout=self._timeout_s, _preload_content=False,
            )
        finally:
            self.api_waited_s += time.perf_counter() - asked
        try:
            body = parsing.mapping(json.loads(listed.data), "PodDisruptionBudgetList")
            found = budgets_of(body)
            more = parsing.mapping(body.get("metadata") or {}, "metadata").get("continue")
        except (ValueError, AttributeError) as e:  # parsing.Invalid is a ValueError
            message = f"unreadable PodDisruptionBudgets of {namespace}: {e}"
            raise errors.ApiError(message[: errors.MAX_DETAIL]) from e
        return [*found, budgets.covering_all(MORE_BUDGETS)] if more else found

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        now = self._clock()
        cached = self._labels.get(namespace)
        if cached is not None and now - cached[0] < NAMESPACE_TTL_S:
            return cached[1]
        asked = time.perf_counter()
        try:
            found: Any = await asyncio.to_thread(
                errors.call, self._core.read_namespace, namespace, _request_timeout=self._timeout_s
            )
            labels = dict(found.metadata.labels or {}) if found.metadata is not None else {}
        except errors.NotFound:
            labels = {}
        finally:
            self.api_waited_s += time.perf_counter() - asked
        if len(self._labels) > 10_000:
            self._labels.clear()
        self._labels[namespace] = (now, labels)
        return labels

    async def evict(self, namespace: str, name: str, uid: str) -> None:
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            # The pod evicted is the one chosen, not a namesake created since.
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
        try:
            await asyncio.to_thread(
                errors.call, self._core.create_namespaced_pod_eviction, name, namespace, body,
                _request_timeout=self._timeout_s,
            )
        except errors.NotFound:
            return  # gone already
        except errors.Conflict:
            return  # the UID precondition failed: the pod chosen is gone


def budgets_of(listed: Mapping[str, Any]) -> list[budgets.Budget]:
    """The budgets of a PodDisruptionBudgetList (the first ``MAX_BUDGETS``)."""
    return [budget_of(parsing.mapping(raw, "items[]"))
            for raw in parsing.sequence(listed.get("items"), "items")[:MAX_BUDGETS]]


def budget_of(item: Mapping[str, Any]) -> budgets.Budget:
    """One PodDisruptionBudget; raises ``parsing.Invalid`` for a field of the wrong JSON type. An
    unparsable or oversized selector selects every pod (it protects rather than exposes); a
    missing status is a stale one (the disruption controller has not read the budget yet)."""
    metadata = parsing.mapping(item.get("metadata"), "metadata")
    spec = parsing.mapping(item.get("spec"), "spec")
    status = parsing.mapping(item.get("status"), "status")
    return budgets.Budget(
        name=parsing.string(metadata.get("name"), "metadata.name")[:MAX_NAME],
        selector=_selector(spec.get("selector")),
        disruptions_allowed=_int(status.get("disruptionsAllowed")),
        current=_int(status.get("observedGeneration"), -1) == _int(metadata.get("generation"), -2),
    )


def _selector(raw: object) -> selectors.Selector | None:
    if raw is None:
        return None
    try:
        parsed = api_topology.LabelSelector.model_validate(raw)
    except pydantic.ValidationError:
        return selectors.Selector()
    return selectors.Selector.compile(parsed) if _bounded(parsed) else selectors.Selector()


def _bounded(selector: api_topology.LabelSelector) -> bool:
    """Within what the API server validates (label keys and values) and a few hundred values."""
    terms = [(k, [v]) for k, v in selector.match_labels.items()]
    terms += [(e.key, e.values) for e in selector.match_expressions]
    values_read = sum(len(values) for _, values in terms)
    return (len(terms) <= MAX_SELECTOR_TERMS and values_read <= MAX_SELECTOR_VALUES
            and all(len(key) <= MAX_LABEL_KEY and all(len(v) <= MAX_LABEL_VALUE for v in values)
                    for key, values in terms))


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
