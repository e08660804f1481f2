"""The operator's run: kopf, the status reporter, the Event poster, the telemetry feed and the
health server, sharing one ``Runtime`` on one event loop.

The composition root (``fabricsched.app``) builds the runtime, adds its companions (the
extender's service) and calls ``serve``. kopf owns the lifetime: it runs until SIGINT/SIGTERM
(or ``stop_flag``), then everything else is cancelled, queued Events get a moment to be
posted, and the servers close.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client

from fabricsched import listwatch
from fabricsched.controller import (
    events,
    handlers,
    health_server,
    informer,
    kube,
    metrics,
    optin,
    reporter,
    runtime,
    state,
    telemetry_feed,
)
from fabricsched.ports import views

logger = logging.getLogger(__name__)

Companion = Coroutine[Any, Any, None]
"""A part that runs as long as the operator (the extender's service): cancelled at shutdown."""
KopfPart = Callable[[kopf.OperatorRegistry, kopf.OperatorSettings], None]
"""Registers handlers on the operator's kopf registry and adjusts its settings."""


class CompanionFailed(RuntimeError):
    """A companion stopped with an error (the extender could not listen on its address, say):
    the process stops with it rather than serve without it."""


@dataclass(frozen=True)
class Companions:
    """What the composition root adds to the operator's run."""

    tasks: Mapping[str, Callable[[], Companion]]
    """Named tasks started next to the operator's own."""
    reserved: views.ReservedGpus | None = None
    """GPUs held by plans (the extender's book): status counts them as taken."""
    gangs: views.GangsOnPath | None = None
    """Which gangs an element touches (the extender's path index): status and Events name them."""
    readiness: Sequence[views.Readiness] = ()
    """Parts that must be ready for ``/readyz`` besides the state's initial listings."""
    kopf_parts: Sequence[KopfPart] = ()
    """Parts that add their own handlers and settings to kopf's (the admission webhook)."""
    optional: frozenset[str] = frozenset()
    """Names of ``tasks`` whose failure is logged only (the fabric page); any other stops the
    process (``CompanionFailed``)."""
    leading: Callable[[], bool] | None = None
    """Whether this replica writes status and Events (``election.LeaseElector.leading``);
    None: a single replica, always."""


def build(options: runtime.OperatorOptions, api: client.ApiClient,
          clock: Callable[[], float] = time.time) -> runtime.Runtime:
    """The shared parts, wired: state, metrics, Event recorder."""
    registry = metrics.Metrics()
    cluster = state.ClusterState(clock)
    recorder = events.EventRecorder(
        kube.event_poster(api), options.events_namespace,
        outcome=lambda outcome: registry.events_posted.labels(outcome).inc(),
    )
    rt = runtime.Runtime(options, cluster, api, recorder, registry, clock)
    registry.watch_state(lambda: _sizes(cluster), lambda: _degraded(cluster))
    return rt


def _sizes(cluster: state.ClusterState) -> Mapping[str, int]:
    return {"nodes": len(cluster.nodes), "pods": len(cluster.pods), "jobs": len(cluster.jobs),
            "fabrictopologies": len(cluster.objects)}


def _degraded(cluster: state.ClusterState) -> Mapping[str, int]:
    return {name: len(tf.health()) for name, tf in cluster.topologies.items()}


async def serve(rt: runtime.Runtime, companions: Companions,
                stop_flag: asyncio.Event | None = None) -> None:
    """Run the operator and its companions until a signal or ``stop_flag``."""
    status_reporter = reporter.StatusReporter(
        rt.state, kube.status_writer(rt.api), rt.clock, rt.metrics, rt.options.status_interval_s,
        reserved=companions.reserved, gangs=companions.gangs, after=companions.readiness,
    )
    if companions.leading is not None:
        status_reporter.leading = rt.recorder.leading = companions.leading
    reporter.forward_health(rt.state, rt.recorder, rt.metrics, rt.clock, companions.gangs)
    optin.forward(rt.state.optin, rt.recorder, rt.metrics.optin_missed.inc)
    connection = listwatch.Connection(lambda: listwatch.login_of(kube.configuration(rt.options.kubeconfig)),
                                      rt.options.api_compression)
    kinds = handlers.kinds(rt)
    gate = handlers.SyncGate(rt, [k.name for k in kinds])
    observer = informer.MetricsObserver(rt.metrics)
    followers = [listwatch.Informer(connection, k, observer, functools.partial(gate.done, k.name))
                 for k in kinds]
    registry = kopf.OperatorRegistry()
    handlers.register(registry, rt, gate)
    settings = handlers.settings(rt)
    for part in companions.kopf_parts:
        part(registry, settings)

    background: list[asyncio.Task[None]] = [
        asyncio.create_task(rt.recorder.run(), name="event poster"),
        asyncio.create_task(status_reporter.run(), name="status reporter"),
        asyncio.create_task(telemetry_feed.run(rt), name="telemetry"),
        *(asyncio.create_task(f.follow(), name=f"watch {f.kind.name}s") for f in followers),
    ]
    health_runner = await health_server.start(rt, [*companions.readiness, status_reporter])
    logger.info("health, readiness and metrics on http://%s", rt.options.health_address)
    stopping = asyncio.Event()
    failures: list[str] = []
    for name, start in companions.tasks.items():
        reported = None if name in companions.optional else failures
        background.append(asyncio.create_task(_guarded(name, start, reported, stopping), name=name))
    if stop_flag is not None:
        background.append(asyncio.create_task(_relay(stop_flag, stopping), name="stop flag"))
    try:
        await kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            clusterwide=True,
            stop_flag=stopping,  # a signal stops kopf too: it handles SIGINT and SIGTERM itself
            memo=kopf.Memo(runtime=rt),
        )
    finally:
        for task in background:
            task.cancel()
        for task in background:
            # Shutdown: a companion that failed has logged already; nothing may stop the rest.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await rt.recorder.drain(timeout_s=2.0)
        await connection.close()
        await health_runner.cleanup()
        await asyncio.to_thread(rt.api.close)
        logger.info("stopped")
    if failures:
        raise CompanionFailed("; ".join(failures))


async def _guarded(name: str, start: Callable[[], Companion], failures: list[str] | None,
                   stopping: asyncio.Event) -> None:
    """Run a companion; if it fails, say so and, unless it is optional (``failures`` None),
    stop the whole process: a task that failed unseen would leave, say, a process that is
    healthy but answers no scheduler."""
    try:
        await start()
    except asyncio.CancelledError:
        raise
    except Exception as e:
        if failures is None:
            logger.exception("%s stopped with an error; fabricsched goes on without it", name)
            return
        logger.exception("%s stopped with an error; stopping fabricsched", name)
        failures.append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
        stopping.set()


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
