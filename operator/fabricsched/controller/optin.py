"""GPU pods of opted-in namespaces created without ``schedulerName: fabricsched``: the sign that
the namespace opt-in webhook was not reached.

The webhook fails open (``failurePolicy: Ignore``): when a NetworkPolicy, a wrong
``webhook.allowedCIDRs``, a missing certificate or a stopped front keeps the API server from
calling it, pods are admitted unchanged and go to the default scheduler, and nothing fails. This
module makes that visible. ``OptInWatch`` follows the namespaces' opt-in label (fed by kopf's
namespace events, ``controller.handlers``) and is told of each GPU pod the cluster state sees for
the first time (``ClusterState.apply_pod``). A pod counts as *missed* when all hold:

- the state's initial listings are in (pods listed at start were counted, or not, before);
- its namespace carries ``fabricsched.io/scheduling=enabled``, and the pod was created at least
  ``GRACE_S`` after this process saw the label (the API server's own view of the label may lag
  a moment; pods made before the opt-in are not the webhook's);
- it requests a positive amount of a FabricTopology's GPU resource (``nvidia.com/gpu`` while
  there is none), as the webhook's ``--webhook-gpu-resource`` should list;
- its scheduler is ``default-scheduler`` (another named scheduler is the user's choice, which
  the webhook keeps too).

Each missed pod is counted once (by UID), told to the listeners (``forward``: the metric
``fabricsched_optin_missed_total`` and a Warning Event ``OptInMissed`` on the pod, at most one
per namespace per ``EVENT_INTERVAL_S`` and ``EVENTS_PER_INTERVAL`` in all), and summed up for the
``OptInMissed`` condition of every FabricTopology's status (``condition``). Memory is bounded:
at most ``MAX_NAMESPACES`` opted-in namespaces are followed and ``MAX_RECORDS`` namespaces'
miss counts kept (the oldest forgotten first), each a few fixed fields.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched import parsing
from fabricsched.api import admission, conditions, rfc3339, schedconfig
from fabricsched.ports import notices
from fabricsched.topology import nodes as k8s

logger = logging.getLogger(__name__)

CONDITION = "OptInMissed"
DEFAULT_SCHEDULER = "default-scheduler"
GRACE_S = 2.0
"""Pods created this soon after the label was seen do not count."""
WINDOW_S = 3600.0
"""The condition is True while the last miss is at most this old, then False."""
EVENT_INTERVAL_S = 60.0
EVENTS_PER_INTERVAL = 20
"""Warning Events per ``EVENT_INTERVAL_S`` over all namespaces; past it, misses are counted only."""
MAX_NAMESPACES = 10_000
MAX_RECORDS = 256
MAX_COUNTED_UIDS = 4096
"""UIDs remembered to count a pod once even if the state sees it anew (a relisting)."""
SHOWN_NAMESPACES = 5


@dataclass(frozen=True)
class Miss:
    """One GPU pod of an opted-in namespace created without the scheduler name."""

    namespace: str
    name: str
    uid: str
    at: float
    in_namespace: int
    """Misses in this namespace so far, this one included."""


@dataclass
class _Record:
    count: int
    last_event_at: float | None = None


@dataclass(frozen=True)
class Summary:
    """What the topology status says: totals since this process started and the last miss."""

    total: int
    last: Miss
    namespaces: tuple[tuple[str, int], ...]
    """The namespaces with the latest misses, newest first, with their counts."""


Listener = Callable[[Miss], None]


class OptInWatch:
    """The opted-in namespaces and the misses seen; call from the event loop (no locking)."""

    def __init__(self, clock: Callable[[], float], gpu_resources: Callable[[], Collection[str]]) -> None:
        self._clock = clock
        self._gpu_resources = gpu_resources
        self._opted: dict[str, float] = {}
        """Namespace -> when this process first saw it opted in."""
        self._records: collections.OrderedDict[str, _Record] = collections.OrderedDict()
        self._counted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._listeners: list[Listener] = []
        self._events: collections.deque[float] = collections.deque()
        self.total = 0
        self.last: Miss | None = None
        self.version = 0
        """Bumped by every miss (the status reporter's input)."""

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def namespace_changed(self, body: Mapping[str, Any], deleted: bool) -> None:
        """A Namespace was listed, changed or deleted (kopf's event)."""
        metadata = body.get("metadata")
        if not isinstance(metadata, Mapping):
            return
        name = metadata.get("name")
        labels = metadata.get("labels")
        if not isinstance(name, str) or not name:
            return
        enabled = (not deleted and isinstance(labels, Mapping)
                   and labels.get(admission.NAMESPACE_LABEL) == admission.NAMESPACE_LABEL_VALUE)
        if not enabled:
            self._opted.pop(name, None)
            if self._records.pop(name, None) is not None:
                self.version += 1
        elif name not in self._opted and len(self._opted) < MAX_NAMESPACES:
            self._opted[name] = self._clock()

    def pod_added(self, pod: k8s.PodUsage, created: object, synced: bool) -> Miss | None:
        """A GPU pod the state holds for the first time; returns the miss it is, if one."""
        opted_at = self._opted.get(pod.namespace)
        if not synced or opted_at is None or pod.scheduler_name != DEFAULT_SCHEDULER:
            return None
        if pod.uid in self._counted or not self._requests_gpu(pod):
            return None
        now = self._clock()
        if _epoch(created, now) < opted_at + GRACE_S:
            return None
        self._counted[pod.uid] = None
        if len(self._counted) > MAX_COUNTED_UIDS:
            self._counted.popitem(last=False)
        record = self._records.pop(pod.namespace, None) or _Record(0)
        record.count += 1
        self._records[pod.namespace] = record  # newest last
        if len(self._records) > MAX_RECORDS:
            self._records.popitem(last=False)
        self.total += 1
        self.version += 1
        miss = Miss(pod.namespace, pod.name, pod.uid, now, record.count)
        self.last = miss
        for listener in list(self._listeners):
            try:
                listener(miss)
            except Exception:
                logger.exception("opt-in miss listener failed")
        return miss

    def _requests_gpu(self, pod: k8s.PodUsage) -> bool:
        resources = self._gpu_resources() or (schedconfig.DEFAULT_GPU_RESOURCE,)
        return any(pod.requests.get(r, 0) > 0 for r in resources)

    def event_allowed(self, namespace: str, now: float) -> bool:
        """One Event per namespace per ``EVENT_INTERVAL_S``, ``EVENTS_PER_INTERVAL`` in all."""
        record = self._records.get(namespace)
        if record is None:
            return False
        if record.last_event_at is not None and now - record.last_event_at < EVENT_INTERVAL_S:
            return False
        while self._events and now - self._events[0] >= EVENT_INTERVAL_S:
            self._events.popleft()
        if len(self._events) >= EVENTS_PER_INTERVAL:
            return False
        self._events.append(now)
        record.last_event_at = now
        return True

    def summary(self) -> Summary | None:
        if self.last is None:
            return None
        newest = list(reversed(self._records.items()))[:SHOWN_NAMESPACES]
        return Summary(self.total, self.last, tuple((ns, r.count) for ns, r in newest))

    def fingerprint(self, now: float) -> int:
        """Moves when the condition would: a new miss, or the last one ageing past the window."""
        recent = self.last is not None and now - self.last.at <= WINDOW_S
        return hash((self.version, recent))


def _epoch(created: object, fallback: float) -> float:
    """``metadata.creationTimestamp`` as epoch seconds; ``fallback`` (now) when unreadable."""
    if isinstance(created, str) and len(created) <= 64:
        try:
            return rfc3339.parse(created)
        except ValueError:
            pass
    return fallback


def notice(miss: Miss) -> notices.Notice:
    """The Warning Event on the pod."""
    return notices.Notice("Warning", CONDITION, (
        f"GPU pod created with schedulerName {DEFAULT_SCHEDULER} in namespace {miss.namespace}, which is "
        f"labelled {admission.NAMESPACE_LABEL}={admission.NAMESPACE_LABEL_VALUE}: the opt-in webhook "
        f"was not reached (blocked by a NetworkPolicy or webhook.allowedCIDRs, fabricsched down, or "
        f"too slow), so the default scheduler places it; {miss.in_namespace} such pod"
        f"{'' if miss.in_namespace == 1 else 's'} in this namespace so far (docs/webhook.md)"))


def pod_ref(miss: Miss) -> notices.ObjectRef:
    return notices.ObjectRef("v1", "Pod", miss.name, miss.uid, miss.namespace)


def condition(summary: Summary | None, previous: Sequence[conditions.Condition], now: float,
              generation: int | None) -> conditions.Condition | None:
    """The ``OptInMissed`` condition; None while no miss was ever seen. A condition stored by an
    earlier process is kept (turned False once its window is over) until this one sees a miss."""
    if summary is None:
        old = next((c for c in previous if c.type == CONDITION), None)
        if old is None or old.status != "True":
            return old
        try:
            since = rfc3339.parse(old.last_transition_time)
        except ValueError:
            since = 0.0
        if now - since <= WINDOW_S:
            return old
        said = "no GPU pod of an opted-in namespace missed the webhook in the last hour"
        return conditions.transition(previous, CONDITION, "False", "NoneRecently", said, now, generation)
    last = summary.last
    shown = ", ".join(f"{parsing.excerpt(ns, 63)} ({n})" for ns, n in summary.namespaces)
    said = (f"{summary.total} GPU pod{'' if summary.total == 1 else 's'} of opted-in namespaces created "
            f"without schedulerName: {schedconfig.SCHEDULER_NAME} since fabricsched started (the opt-in "
            f"webhook was not reached); last {last.namespace}/{last.name} at "
            f"{rfc3339.format_epoch(last.at)}; namespaces: {shown}")
    if now - last.at <= WINDOW_S:
        return conditions.transition(previous, CONDITION, "True", "PodsMissedWebhook", said, now, generation)
    return conditions.transition(previous, CONDITION, "False", "NoneRecently",
                                 "none in the last hour; before: " + said, now, generation)


def forward(watch: OptInWatch, recorder: notices.Recorder, count: Callable[[], None]) -> None:
    """Every miss counted (``count``: the metric) and, rate-limited, a Warning Event."""

    def on_miss(miss: Miss) -> None:
        count()
        logger.warning("pod %s/%s: GPU pod of an opted-in namespace created without schedulerName %s "
                       "(the opt-in webhook was not reached)", miss.namespace, miss.name,
                       schedconfig.SCHEDULER_NAME)
        if watch.event_allowed(miss.namespace, miss.at):
            recorder.record(pod_ref(miss), notice(miss), miss.at)

    watch.listen(on_miss)
