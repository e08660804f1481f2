"""The extender as one service: the book, the coordinator, the FabricPlacement writer and the
HTTP server, built on typed parts the composition root (``fabricsched.app``) hands over.

What it reads of the rest of the process is the seam's (``fabricsched.ports``): the cluster
state as a ``views.StateView``, the Event recorder as a ``notices.Recorder``. What it gives
back is typed too: the GPUs its plans hold (``reservations``, a ``views.ReservedGpus`` the
status reporter reads) and whether it makes decisions yet (``not_ready``, for ``/readyz``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import prometheus_client
from aiohttp import web
from kubernetes import client

from fabricsched.extender.book import (
    following,
    mirror,
    objects,
    path_health,
    pending,
    released,
    reservations,
    workloads,
)
from fabricsched.extender.decide import coordinator, owners, pod_identity, preempting, preemption_options
from fabricsched.extender.http import metrics, server
from fabricsched.extender.http import tls as server_tls
from fabricsched.extender.kube import disruptions, evictions, feed, fetchers, store, wakeup, writer
from fabricsched.placement import patience, request, session
from fabricsched.ports import errors, notices, views

logger = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_S = 1.0
RESTORE_RETRY_S = 2.0
SYNC_POLL_S = 0.1
NOT_RESTORED = "fabricsched is starting: its reservations are not restored yet"
RESTART_PLACEMENTS = ("previous", "fresh")
"""``--restart-placement``: a gang whose whole group restarted goes back where it ran, or not."""


@dataclass(frozen=True)
class ServiceOptions:
    """The extender's part of ``fabricsched run``'s flags, validated here (the command turns
    the ValueError into a usage error)."""

    address: str = "127.0.0.1:8888"
    """host:port the kube-scheduler calls (``--extender-address``)."""
    reservation_ttl_s: float = 120.0
    """Seconds a plan holds unbound ranks without a newly bound one (``--reservation-ttl``)."""
    max_body_bytes: int = server.DEFAULT_MAX_BODY_BYTES
    """Largest request body accepted (``--extender-max-body-bytes``); larger ones get a 400."""
    locality_wait: request.LocalityWait = patience.DEFAULT_LOCALITY_WAIT
    """The cluster's default wait for locality (``--locality-wait``; the simulator's too)."""
    fit_order: request.FitOrder = request.DEFAULT_FIT_ORDER
    """Best fit's tie-break (``--fit-order``; the simulator's too), for plans and preemption's."""
    max_reserved_gpus_per_namespace: int = 0
    """Most GPUs one namespace's gangs may hold reserved but unbound
    (``--max-reserved-gpus-per-namespace``; 0: no limit)."""
    wake_namespace: str = ""
    """Namespace of the object updated to make the kube-scheduler retry waiting gangs when
    capacity frees (``wakeup``; ``fabricsched run`` uses its lease namespace); empty: off."""
    tls: server_tls.TLSFiles | None = None
    """HTTPS with client certificates (``--extender-tls-cert/-key``, ``--extender-client-ca``);
    None: plain HTTP."""
    preemption: preemption_options.PreemptionOptions = field(
        default_factory=preemption_options.PreemptionOptions)
    """``--preemption``, ``--preemption-rate``, ``--preemption-evict-kueue`` (docs/preemption.md)."""
    restart_placement: str = "previous"
    """``--restart-placement``: ``previous`` plans a gang whose whole group restarted back where
    it ran when its plan was released within the last hour and that is as good as a fresh plan
    (docs/placement.md); ``fresh`` plans it from scratch (the behaviour before)."""
    api_compression: bool = False
    """Ask the API server to gzip the listings of FabricPlacements, budgets and namespaces
    (``--api-compression``; ``listwatch.Connection``)."""

    def __post_init__(self) -> None:
        if self.max_reserved_gpus_per_namespace < 0:
            raise ValueError(f"must be 0 (no limit) or more, not {self.max_reserved_gpus_per_namespace}")
        split_address(self.address)
        # The parts check their own bounds: build them once so a bad flag fails at start.
        self.book_options()
        self.server_options()
        self.releases()
        if self.tls is not None:
            self.tls.context()

    def releases(self) -> released.Releases:
        """Where released gangs ran, kept for ``--restart-placement previous`` (none for fresh)."""
        if self.restart_placement not in RESTART_PLACEMENTS:
            raise ValueError(f"restart placement must be one of {', '.join(RESTART_PLACEMENTS)}, "
                             f"not {self.restart_placement[:32]!r}")
        return released.Releases(released.DEFAULT_WINDOW_S if self.restart_placement == "previous" else 0.0)

    def preemption_options(self) -> preemption_options.PreemptionOptions:
        """``preemption`` planning with this ``fit_order``."""
        placement = dataclasses.replace(self.preemption.placement, fit_order=self.fit_order)
        return dataclasses.replace(self.preemption, placement=placement)

    def book_options(self) -> reservations.BookOptions:
        return reservations.BookOptions(self.reservation_ttl_s)

    def server_options(self) -> server.ServerOptions:
        return server.ServerOptions(self.max_body_bytes)


class Service:
    """The extender's parts, wired; ``run`` serves until cancelled. The extender's only place
    that builds parts: each gets what it needs through its constructor."""

    def __init__(
        self,
        state: views.StateView,
        placement_store: writer.PlacementStore,
        jobs: owners.JobFetcher | None,
        recorder: notices.Recorder,
        clock: Callable[[], float],
        options: ServiceOptions,
        registry: prometheus_client.CollectorRegistry | None = None,
        owner_fetcher: owners.OwnerFetcher | None = None,
        pods: pod_identity.PodLookup | None = None,
        nudger: wakeup.Nudger | None = None,
        leading: Callable[[], bool] = lambda: True,
        placement_feed: mirror.PlacementFeed | None = None,
        preemption_calls: preemption_options.PreemptionCalls | None = None,
        preemption_follow: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self.state = state
        self.options = options
        self.feed = placement_feed
        self.preemption_follow = preemption_follow
        """Keeps what ``preemption_calls`` answers from current (the budget and namespace watches)."""
        self.store = placement_store
        events = store.RecorderEvents(recorder, clock)
        owner_cache = owners.OwnerCache(state, owner_fetcher, jobs, clock)
        registry_of_workloads = workloads.Registry()
        tracker = path_health.PathHealth(state, events, clock, registry_of_workloads.workload_of)
        self.book = reservations.Book(options.book_options(), tracker.annotate)
        self.writer = writer.PlacementWriter(placement_store, leading=leading)
        extender_metrics = metrics.ExtenderMetrics(registry) if registry is not None else None
        self.board = board = pending.PendingBoard(
            self.writer, clock, on_planned=extender_metrics.observe_plan if extender_metrics else None
        )
        if registry is not None:
            metrics.ExtenderMetrics.watch_book(registry, state, self.book, board)
        self.key_of = owner_cache.key
        """The process's one gang key function (for the fabric page)."""
        self.follower = following.Follower(
            state, self.book, self.writer, clock, owner_cache.key,
            lambda pod, resource: owner_cache.membership(pod, resource)[1], tracker, options.releases(),
        )
        self.wakeups: wakeup.WakeUps | None = None
        """Makes the kube-scheduler retry waiting gangs when capacity frees (None: off)."""
        if nudger is not None:
            self.wakeups = wakeup.WakeUps(nudger, lambda: board.waiting > 0)
        placing = session.Session()
        self.preempter: preempting.GangPreemption | None = None
        """Preemption's sweep (None without the API calls it needs, or ``--preemption off``)."""
        if preemption_calls is not None and options.preemption.enabled:
            self.preempter = preempting.GangPreemption(
                state, self.book, self.follower, self.writer, events, owner_cache, board,
                registry_of_workloads, preemption_calls, placing, clock, options.preemption_options(),
                leading,
                on_round=extender_metrics.observe_round if extender_metrics else lambda victims, lost: None,
                on_planned=self.wakeups.planned if self.wakeups is not None else lambda: None,
            )
        parts = coordinator.Parts(
            state, self.book, self.writer, events, owner_cache, tracker, registry_of_workloads, board,
            self.follower, placing,
            pod_identity.PodIdentity(state, pods, clock) if pods is not None else None, self.preempter,
        )
        self.coordinator = coordinator.Coordinator(
            parts, clock,
            coordinator.CoordinatorOptions(
                request.PlacementOptions(locality_wait=options.locality_wait, fit_order=options.fit_order),
                max_reserved_gpus_per_namespace=options.max_reserved_gpus_per_namespace,
            ),
            on_freed=self.wakeups.freed if self.wakeups is not None else lambda: None,
            on_held=self.wakeups.hold_ends_in if self.wakeups is not None else lambda retry_in_s: None,
        )
        self.gangs_on_path: views.GangsOnPath = path_health.AffectedGangs(tracker, self.book)
        """Which gangs an element touches (for FabricTopology status and Events)."""
        self._latency = _latency_histogram(registry) if registry is not None else None

    @property
    def reservations(self) -> views.ReservedGpus:
        """GPUs held by unbound ranks of plans, per topology (for FabricTopology status)."""
        return self.book

    def not_ready(self) -> str | None:
        """``views.Readiness``: no decision is made before the reservations are restored."""
        return None if self.coordinator.ready else NOT_RESTORED

    def app(self) -> web.Application:
        return server.make_app(self.coordinator, self.options.server_options(), self._observe)

    async def run(self) -> None:
        """Listen on ``options.address`` and keep the book current until cancelled."""
        host, port = split_address(self.options.address)
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        unsubscribe = self.state.subscribe(self.coordinator.on_change)
        tasks = [
            asyncio.create_task(self.writer.run(), name="fabricplacement-writer"),
            asyncio.create_task(self._restore(), name="extender-restore"),
        ]
        if self.wakeups is not None:
            tasks.append(asyncio.create_task(self.wakeups.run(), name="extender-wakeups"))
        if self.preempter is not None:
            ready = lambda: self.coordinator.ready  # noqa: E731
            tasks.append(asyncio.create_task(self.preempter.run(ready), name="extender-preemption"))
            if self.preemption_follow is not None:  # on every replica: a new leader has them at hand
                tasks.append(asyncio.create_task(self.preemption_follow(), name="extender-disruptions"))
        try:
            context = self.options.tls.context() if self.options.tls is not None else None
            await web.TCPSite(runner, host, port, ssl_context=context).start()
            logger.info("extender listening on %s://%s:%d%s", "https" if context else "http", host, port,
                        " (client certificates required)" if context else "")
            await asyncio.Event().wait()
        finally:
            unsubscribe()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.writer.flush(2.0)
            await runner.cleanup()

    async def _restore(self) -> None:
        # Decisions wait for the state's first full listing and the stored plans: deciding
        # earlier could hand a reserved node to another gang.
        while not self.state.synced:
            await asyncio.sleep(SYNC_POLL_S)
        while True:
            try:
                manifests = await self.store.load()
                break
            except errors.ApiError as e:
                logger.warning("could not restore reservations (retrying): %s", e)
                await asyncio.sleep(RESTORE_RETRY_S)
        self.coordinator.restore(_readable(manifests))
        follow = asyncio.create_task(self._follow(), name="fabricplacement-mirror")
        try:
            await _run_housekeeping(self.coordinator, HOUSEKEEPING_INTERVAL_S)
        finally:
            follow.cancel()

    async def _follow(self) -> None:
        # The other replica's plans (two replicas, one of them called): see ``mirroring``.
        if self.feed is not None:
            plans = mirror.PlanMirror(self.book, self.follower, self.feed.covers)
            await self.feed.follow(plans.on_event)

    def _observe(self, verb: str, seconds: float, outcome: str) -> None:
        if self._latency is not None:
            self._latency.labels(verb, outcome).observe(seconds)


def on_api(
    state: views.StateView,
    api_client: client.ApiClient,
    recorder: notices.Recorder,
    clock: Callable[[], float],
    options: ServiceOptions,
    registry: prometheus_client.CollectorRegistry | None = None,
    leading: Callable[[], bool] = lambda: True,
) -> Service:
    """The service with its FabricPlacement store and watch, Job, owner and pod lookups on
    ``api_client``; ``leading`` gates the background writes (two replicas: the Lease holder's)."""
    placement_store = store.ApiPlacementStore(api_client)
    calls, follow = preemption_calls_on(api_client, options.preemption, options.api_compression)
    return Service(
        state, placement_store, store.ApiJobFetcher(api_client), recorder, clock, options, registry,
        fetchers.ApiOwnerFetcher(api_client), fetchers.ApiPodLookup(api_client),
        wakeup.ApiNudger(api_client, options.wake_namespace) if options.wake_namespace else None,
        leading=leading,
        placement_feed=feed.ApiPlacementFeed(
            api_client, placement_store.covers, since=lambda: placement_store.listed_version,
            compression=options.api_compression),
        preemption_calls=calls, preemption_follow=follow,
    )


def preemption_calls_on(
    api_client: client.ApiClient, options: preemption_options.PreemptionOptions, compression: bool = False,
) -> tuple[preemption_options.PreemptionCalls, Callable[[], Coroutine[Any, Any, None]] | None]:
    """What preemption reads budgets and namespaces through, and the task that keeps it current:
    their watches (``--preemption-budgets watch``), or reads at each decision (``read``: none)."""
    if options.budgets_from == "read":
        return evictions.ApiPreemptionCalls(api_client), None
    followed = disruptions.FollowedDisruptions(api_client, compression=compression)
    return followed, followed.follow


def _readable(manifests: list[dict[str, Any]]) -> list[reservations.Entry]:
    """The plans the stored objects describe; an unreadable object is skipped with a warning."""
    entries = []
    for manifest in manifests:
        try:
            entries.append(objects.entry_of(manifest))
        except objects.Unreadable as e:
            logger.warning("ignoring an unreadable FabricPlacement: %s", e)
    return entries


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` -> (host, port), an empty host meaning every address; raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"extender address {address!r} is not host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def _latency_histogram(registry: prometheus_client.CollectorRegistry) -> prometheus_client.Histogram:
    return prometheus_client.Histogram(
        "fabricsched_extender_request_seconds",
        "Time to answer one kube-scheduler extender call.",
        ["verb", "outcome"],
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        registry=registry,
    )


async def _run_housekeeping(coordinator_: coordinator.Coordinator, interval_s: float) -> None:
    """Call ``housekeeping`` every ``interval_s`` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            coordinator_.housekeeping()
        except Exception:  # pure book work: only a defect lands here, and expiry must go on
            logger.exception("extender housekeeping failed")
