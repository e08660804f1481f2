"""One ``fabricsched run`` process: kopf, the status reporter, the Event poster, the health
server and (when installed) the extender, sharing one ``Runtime`` on one event loop.

kopf owns the lifetime: it runs until SIGINT/SIGTERM (or ``stop_flag``), then everything else
is cancelled, queued Events get a moment to be posted, and the servers close.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from types import ModuleType
from typing import Any

import kopf

from fabricsched import ids
from fabricsched.controller import (
    events,
    handlers,
    health_server,
    kube,
    metrics,
    reporter,
    runtime,
    state,
    telemetry_feed,
)

logger = logging.getLogger(__name__)

EXTENDER_MODULE = "fabricsched.extender.service"


def build(options: runtime.Options, api: Any, clock: Callable[[], float] = time.time) -> runtime.Runtime:
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


def _extender() -> ModuleType | None:
    try:
        return importlib.import_module(EXTENDER_MODULE)
    except ModuleNotFoundError as e:
        if e.name != EXTENDER_MODULE:
            raise
        return None


async def serve(options: runtime.Options, stop_flag: asyncio.Event | None = None) -> None:
    """Run the operator until a signal or ``stop_flag``."""
    api = kube.api_client(options.kubeconfig)
    rt = build(options, api)
    status_reporter = reporter.StatusReporter(
        rt.state, kube.status_writer(api), rt.clock, rt.metrics, options.status_interval_s,
        reserved=lambda name: _reserved(rt, name),
    )
    reporter.forward_health(rt.state, rt.recorder, rt.metrics, rt.clock)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, rt)

    background: list[asyncio.Task[Any]] = [
        asyncio.create_task(rt.recorder.run(), name="event poster"),
        asyncio.create_task(status_reporter.run(), name="status reporter"),
        asyncio.create_task(telemetry_feed.run(rt), name="telemetry"),
    ]
    health_runner = await health_server.start(rt)
    logger.info("health, readiness and metrics on http://%s", options.health_address)
    extender = _extender()
    if extender is not None:
        serve_extender: Callable[[runtime.Runtime, str], Coroutine[Any, Any, None]] = extender.serve
        background.append(asyncio.create_task(serve_extender(rt, options.extender_address), name="extender"))
        logger.info("extender on %s", options.extender_address)
    else:
        logger.info("extender not installed (%s); running the operator alone", EXTENDER_MODULE)
    try:
        await kopf.operator(
            registry=registry,
            settings=handlers.settings(rt),
            standalone=True,
            clusterwide=True,
            stop_flag=stop_flag,
            memo=kopf.Memo(runtime=rt),
        )
    finally:
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await rt.recorder.drain(timeout_s=2.0)
        await health_runner.cleanup()
        await asyncio.to_thread(api.close)
        logger.info("stopped")


def _reserved(rt: runtime.Runtime, name: ids.TopologyName) -> Mapping[ids.NodeName, int]:
    return rt.reserved_gpus(name) if rt.reserved_gpus is not None else {}
