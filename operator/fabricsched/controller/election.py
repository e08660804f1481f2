"""Leader election over a coordination.k8s.io Lease: which replica of ``fabricsched run`` writes.

Two replicas run side by side (the chart's two pods); both watch the cluster and keep their
state and their extender's book warm, but only the holder of fabricsched's Lease writes
FabricTopology status, Events and the FabricPlacement writer's background writes. The
decision each round (``decide``) is pure; ``LeaseElector`` does the reads and writes.

The rules are client-go's ``leaderelection`` package, so they read as the kube-scheduler's:
- a Lease is taken over only when its record has not changed for ``lease_s`` as measured on
  this replica's own monotonic clock (never by comparing the holder's timestamps with ours,
  which would make clock skew decide);
- the holder renews every ``retry_s`` and stops counting itself as leader once ``renew_deadline_s``
  passed without a successful renewal, which is before anyone may take over (``lease_s``);
- every write carries the resourceVersion read, so two replicas racing for a free Lease
  cannot both win: one gets 409 and waits;
- stopping cleanly gives the Lease up (holder cleared), so the other replica takes over at its
  next round instead of waiting the lease out.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from fabricsched.ports import errors

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ElectionOptions:
    namespace: str
    name: str
    identity: str
    """Written as ``holderIdentity``: unique per process (``default_identity``)."""
    lease_s: float = 15.0
    """``leaseDurationSeconds``: how long a silent holder is waited for (kube-scheduler's default)."""
    renew_deadline_s: float = 10.0
    """How long the holder keeps acting without a successful renewal."""
    retry_s: float = 2.0
    """Time between two rounds (a renewal or an attempt to take the Lease)."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.lease_s:
            raise ValueError("need 0 < retry < renew deadline < lease duration, got "
                             f"{self.retry_s:g} / {self.renew_deadline_s:g} / {self.lease_s:g} s")
        if not self.identity:
            raise ValueError("the election needs an identity")


def default_identity() -> str:
    """``<pod name>_<random>``: the pod name (``POD_NAME``, else the host name) says where the
    holder runs; the random part tells two processes of one pod apart across a restart."""
    where = os.environ.get("POD_NAME") or socket.gethostname() or "fabricsched"
    return f"{where[:200]}_{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Record:
    """What a round needs of the Lease as read."""

    holder: str
    duration_s: float
    transitions: int
    version: str
    """``metadata.resourceVersion``: the guard of the write that follows."""
    renewed: str
    """``spec.renewTime`` as text: with the holder, what tells a live holder from a silent one."""


class Action(enum.Enum):
    CREATE = "create"
    RENEW = "renew"
    TAKE = "take"
    WAIT = "wait"


def decide(record: Record | None, identity: str, silent_for_s: float) -> Action:
    """This round's move, given the Lease (None: none exists) and how long its record has been
    seen unchanged on this replica's clock."""
    if record is None:
        return Action.CREATE
    if record.holder == identity:
        return Action.RENEW
    if not record.holder or silent_for_s >= record.duration_s:
        return Action.TAKE
    return Action.WAIT


class LeaseElector:
    """Takes and renews the Lease from the event loop (each API call in a worker thread)."""

    def __init__(self, api_client: client.ApiClient, options: ElectionOptions,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self._api = client.CoordinationV1Api(api_client)
        self._monotonic = monotonic
        self._renewed_at: float | None = None
        """Monotonic time of this replica's last successful write of the Lease."""
        self._seen: tuple[str, str, str] | None = None
        self._seen_at = 0.0
        self.transitions = 0
        """Times this replica became the leader (for logs and tests)."""

    def leading(self) -> bool:
        """True while this replica holds the Lease and renewed it within the renew deadline."""
        return (self._renewed_at is not None
                and self._monotonic() - self._renewed_at < self.options.renew_deadline_s)

    async def run(self) -> None:
        """Elect until cancelled; gives the Lease up when cancelled while holding it."""
        try:
            while True:
                was = self.leading()
                try:
                    await asyncio.to_thread(self._round)
                except errors.ApiError as e:
                    logger.warning("leader election round on Lease %s/%s failed: %s",
                                   self.options.namespace, self.options.name, e)
                now = self.leading()
                if now and not was:
                    self.transitions += 1
                    logger.info("now the leader (Lease %s/%s, identity %s): writing status and Events",
                                self.options.namespace, self.options.name, self.options.identity)
                elif was and not now:
                    logger.warning("no longer the leader (Lease %s/%s): standing by",
                                   self.options.namespace, self.options.name)
                await asyncio.sleep(self.options.retry_s)
        finally:
            if self._renewed_at is not None:
                self._renewed_at = None
                with contextlib.suppress(errors.ApiError):
                    await asyncio.wait_for(asyncio.to_thread(self._give_up), REQUEST_TIMEOUT_S)

    def _round(self) -> None:
        lease = self._read()
        record = _record(lease) if lease is not None else None
        now = self._monotonic()
        if record is not None:
            seen = (record.holder, record.renewed, record.version)
            if seen != self._seen:
                self._seen, self._seen_at = seen, now
        action = decide(record, self.options.identity, now - self._seen_at)
        if action is Action.WAIT:
            if self._renewed_at is not None and record is not None:
                self._renewed_at = None  # someone else holds it: stop acting at once
            return
        try:
            if action is Action.CREATE:
                self._create()
            else:
                assert lease is not None and record is not None
                self._write(lease, record, taking=action is Action.TAKE)
        except errors.Conflict:
            return  # another replica wrote first; the next round reads its record
        self._renewed_at = now

    def _read(self) -> Any:
        try:
            return errors.call(self._api.read_namespaced_lease, self.options.name, self.options.namespace,
                               _request_timeout=REQUEST_TIMEOUT_S)
        except errors.NotFound:
            return None

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        stamp = _micro_time()
        return {
            "holderIdentity": self.options.identity,
            "leaseDurationSeconds": round(self.options.lease_s),
            "acquireTime": acquired or stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    def _create(self) -> None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.options.name, "namespace": self.options.namespace},
                "spec": self._spec(0, None)}
        errors.call(self._api.create_namespaced_lease, self.options.namespace, body,
                    _request_timeout=REQUEST_TIMEOUT_S)

    def _write(self, lease: Any, record: Record, taking: bool) -> None:
        acquired = None if taking else _text(lease.spec.acquire_time) if lease.spec else None
        transitions = record.transitions + 1 if taking else record.transitions
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.options.name, "namespace": self.options.namespace,
                             "resourceVersion": record.version},
                "spec": self._spec(transitions, acquired)}
        errors.call(self._api.replace_namespaced_lease, self.options.name, self.options.namespace, body,
                    _request_timeout=REQUEST_TIMEOUT_S)

    def _give_up(self) -> None:
        lease = self._read()
        if lease is None or _record(lease).holder != self.options.identity:
            return
        record = _record(lease)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.options.name, "namespace": self.options.namespace,
                             "resourceVersion": record.version},
                "spec": {"leaseDurationSeconds": 1, "leaseTransitions": record.transitions,
                         "renewTime": _micro_time()}}
        errors.call(self._api.replace_namespaced_lease, self.options.name, self.options.namespace, body,
                    _request_timeout=REQUEST_TIMEOUT_S)
        logger.info("gave up Lease %s/%s", self.options.namespace, self.options.name)


def _record(lease: Any) -> Record:
    spec = lease.spec
    return Record(
        holder=str(getattr(spec, "holder_identity", None) or ""),
        duration_s=float(getattr(spec, "lease_duration_seconds", None) or 0),
        transitions=int(getattr(spec, "lease_transitions", None) or 0),
        version=str(lease.metadata.resource_version or ""),
        renewed=_text(getattr(spec, "renew_time", None)) or "",
    )


def _text(moment: Any) -> str | None:
    if moment is None:
        return None
    if isinstance(moment, datetime.datetime):
        return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(moment)


def _micro_time() -> str:
    """A ``MicroTime`` (RFC 3339 with microseconds, UTC), as Lease times are written."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
