"""The extender inside ``fabricsched run``: wiring of the book, the coordinator, the
FabricPlacement writer and the HTTP server onto the operator's ``Runtime``.

``serve(runtime, address)`` is the hook ``fabricsched run`` calls. ``build`` is there for a
caller that wants the pieces first (the status reporter can show reserved GPUs through
``Service.reserved``). The runtime is read duck-typed (``RuntimeView``): the controller and
the extender are sibling adapters and do not import each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import prometheus_client
from aiohttp import web

from fabricsched import ids
from fabricsched.extender import coordinator, kubeapi, locality, placements, ports, reservations, server
from fabricsched.placement import request

logger = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_S = 1.0
RESTORE_RETRY_S = 2.0


class RuntimeView(Protocol):
    """The parts of ``controller.runtime.Runtime`` the extender uses."""

    @property
    def state(self) -> Any: ...
    @property
    def api(self) -> Any: ...
    @property
    def recorder(self) -> Any: ...
    @property
    def metrics(self) -> Any: ...
    @property
    def options(self) -> Any: ...
    @property
    def clock(self) -> Callable[[], float]: ...


@dataclass(frozen=True)
class ServiceOptions:
    reservation_ttl_s: float = 120.0
    max_body_bytes: int = server.DEFAULT_MAX_BODY_BYTES
    locality_wait: request.LocalityWait = field(default_factory=request.LocalityWait)
    """The cluster's default wait for locality; off unless ``--locality-wait`` sets it."""

    @classmethod
    def of(cls, runtime_options: Any) -> ServiceOptions:
        """From ``fabricsched run`` options, where set (older options lack these fields).
        Raises ValueError for a locality flag that does not parse (the command checks first)."""
        default = request.LocalityWait()
        wait = locality.cluster_default(
            str(getattr(runtime_options, "locality_wait", "0s")),
            getattr(runtime_options, "locality_tolerance", default.tolerance),
        )
        return cls(
            reservation_ttl_s=float(getattr(runtime_options, "reservation_ttl_s", cls.reservation_ttl_s)),
            max_body_bytes=int(getattr(runtime_options, "extender_max_body_bytes", cls.max_body_bytes)),
            locality_wait=wait,
        )


class Service:
    """The extender's parts, built on one runtime."""

    def __init__(self, runtime: RuntimeView, options: ServiceOptions) -> None:
        self.runtime = runtime
        self.options = options
        self.book = reservations.Book(reservations.BookOptions(options.reservation_ttl_s))
        self.writer = placements.PlacementWriter(kubeapi.ApiPlacementStore(runtime.api), self.book)
        state: ports.StateView = runtime.state
        self.coordinator = coordinator.Coordinator(
            state,
            self.book,
            self.writer,
            kubeapi.RecorderEvents(runtime.recorder, runtime.clock),
            runtime.clock,
            coordinator.CoordinatorOptions(request.PlacementOptions(locality_wait=options.locality_wait)),
            kubeapi.ApiJobFetcher(runtime.api),
        )
        self._latency = _latency_histogram(getattr(runtime.metrics, "registry", None))

    def reserved(self, topology: ids.TopologyName) -> Mapping[ids.NodeName, int]:
        """GPUs per node held by unbound ranks of plans in ``topology`` (for its status)."""
        totals: dict[ids.NodeName, int] = {}
        for entry in self.book.entries():
            if entry.topology == topology:
                for _, node in entry.held():
                    totals[node] = totals.get(node, 0) + entry.gpus_per_pod
        return totals

    async def run(self, address: str) -> None:
        """Serve until cancelled."""
        host, port = _split(address)
        app = server.make_app(
            self.coordinator, server.ServerOptions(self.options.max_body_bytes), self._observe
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        unsubscribe = self.runtime.state.subscribe(self.coordinator.on_change)
        tasks = [
            asyncio.create_task(self.writer.run(), name="fabricplacement-writer"),
            asyncio.create_task(self._restore(), name="extender-restore"),
        ]
        try:
            await web.TCPSite(runner, host, port).start()
            logger.info("extender listening on %s:%d", host, port)
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
        while not self.runtime.state.synced:
            await asyncio.sleep(0.1)
        while True:
            try:
                await self.coordinator.restore()
                break
            except Exception as e:
                logger.warning("could not restore reservations (retrying): %s", e)
                await asyncio.sleep(RESTORE_RETRY_S)
        await coordinator.run_housekeeping(self.coordinator, HOUSEKEEPING_INTERVAL_S)

    def _observe(self, verb: str, seconds: float, outcome: str) -> None:
        if self._latency is not None:
            self._latency.labels(verb, outcome).observe(seconds)


async def serve(runtime: RuntimeView, address: str) -> None:
    """Run the extender on ``address`` (``host:port``) inside ``fabricsched run``."""
    service = Service(runtime, ServiceOptions.of(runtime.options))
    if hasattr(runtime, "reserved_gpus"):
        # The operator's status reporter counts reserved GPUs as taken in FabricTopology status.
        runtime.reserved_gpus = service.reserved
    await service.run(address)


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"extender address {address!r} is not host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def _latency_histogram(registry: Any) -> Any:
    if registry is None:
        return None
    return prometheus_client.Histogram(
        "fabricsched_extender_request_seconds",
        "Time to answer one kube-scheduler extender call.",
        ["verb", "outcome"],
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        registry=registry,
    )
