"""kopf handlers: watch events in, ``ClusterState`` updates out. Thin on purpose.

Why index handlers apply the objects: kopf calls every ``@kopf.index`` handler for each object
of the initial listings *before* it lets any other handler run (the operator is "indexed" only
when all listings of indexed resources are through). So the first ``@kopf.on.event`` call
anywhere means every initial object has been applied: that is when the state is ``synced``
(readiness). Namespaces are watched for that signal alone, since a cluster always has some.
Deletions never reach index handlers, so ``@kopf.on.event`` handlers apply them.

Nothing here writes to the watched objects: index and event handlers keep no progress or
diff-base annotations and add no finalizers (kopf only does that for change handlers).
Handlers are ``async`` so they run on the event loop, never in kopf's thread pool: the state
is not thread-safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from fabricsched.api import topology as api
from fabricsched.controller import dra, kube, runtime

logger = logging.getLogger(__name__)

NODES = ("", "v1", "nodes")
PODS = ("", "v1", "pods")
JOBS = ("batch", "v1", "jobs")
TOPOLOGIES = (api.GROUP, api.VERSION, api.PLURAL)
NAMESPACES = ("", "v1", "namespaces")


def register(registry: kopf.OperatorRegistry, rt: runtime.Runtime) -> None:
    """Add the operator's handlers (and its login) to ``registry``."""
    cluster = rt.state
    metrics = rt.metrics

    def applying(kind: str, apply: Callable[[Mapping[str, Any]], None]) -> Callable[..., Any]:
        async def index_fn(body: Mapping[str, Any], **_: Any) -> None:
            started = time.perf_counter()
            try:
                apply(body)
            except Exception:  # an object no parser foresaw must not stop the watch of all others
                metrics.handler_errors.labels(kind).inc()
                logger.exception("cannot apply %s %s", kind, _name(body))
                return
            metrics.watch_events.labels(kind, "applied").inc()
            metrics.apply_seconds.labels(kind).observe(time.perf_counter() - started)
        index_fn.__name__ = f"apply_{kind}"
        return index_fn

    def deleting(kind: str, delete: Callable[[Mapping[str, Any]], None]) -> Callable[..., Any]:
        async def event_fn(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
            if not cluster.synced:
                _mark_synced(rt)
            if type != "DELETED":
                return
            try:
                delete(body)
            except Exception:  # as above: one object never stops the watch
                metrics.handler_errors.labels(kind).inc()
                logger.exception("cannot delete %s %s", kind, _name(body))
                return
            metrics.watch_events.labels(kind, "deleted").inc()
        event_fn.__name__ = f"delete_{kind}"
        return event_fn

    def meta(body: Mapping[str, Any]) -> tuple[str, str]:
        metadata = body.get("metadata") or {}
        return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")

    kinds: list[tuple[str, tuple[str, str, str], Callable[[Mapping[str, Any]], None],
                      Callable[[Mapping[str, Any]], None]]] = [
        ("node", NODES, cluster.apply_node, lambda b: cluster.delete_node(meta(b)[1])),
        ("pod", PODS, cluster.apply_pod, lambda b: cluster.delete_pod(*meta(b))),
        ("job", JOBS, cluster.apply_job, lambda b: cluster.delete_job(*meta(b))),
        ("fabrictopology", TOPOLOGIES, lambda b: cluster.apply_topology(meta(b)[1], b),
         lambda b: cluster.delete_topology(meta(b)[1])),
    ]
    for kind, resource, apply, delete in kinds:
        kopf.index(*resource, id=f"apply-{kind}", registry=registry)(applying(kind, apply))
        kopf.on.event(*resource, id=f"delete-{kind}", registry=registry)(deleting(kind, delete))

    dra.register(registry, rt)  # DRA device taints (source dra)

    @kopf.on.event(*NAMESPACES, id="sync-barrier", registry=registry)
    async def _barrier(**_: Any) -> None:
        if not cluster.synced:
            _mark_synced(rt)

    @kopf.on.login(id="kubeconfig", registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        return kube.connection_info(rt.options.kubeconfig)


def _mark_synced(rt: runtime.Runtime) -> None:
    rt.state.mark_synced()
    sizes = {"nodes": len(rt.state.nodes), "gpu pods": len(rt.state.pods), "jobs": len(rt.state.jobs),
             "topologies": len(rt.state.objects)}
    logger.info("initial listings applied: %s", ", ".join(f"{v} {k}" for k, v in sizes.items()))


def settings(rt: runtime.Runtime) -> kopf.OperatorSettings:
    """kopf settings for a watch-only operator that writes nothing onto watched objects."""
    s = kopf.OperatorSettings()
    s.posting.enabled = False  # our Events are written by the recorder, with our reasons
    s.peering.standalone = True
    s.peering.clusterwide = True
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    s.watching.connect_timeout = 10
    s.networking.request_timeout = 30
    # Belt and braces: progress and diff-base storage are used only by change handlers, which
    # this operator does not register; keep them in annotations of nothing by naming our prefix.
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="fabricsched.io")
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="fabricsched.io")
    s.persistence.finalizer = "fabricsched.io/kopf-finalizer"
    return s


def _name(body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata") or {}
    ns = metadata.get("namespace")
    return f"{ns}/{metadata.get('name')}" if ns else str(metadata.get("name"))
