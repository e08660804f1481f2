"""What the operator watches: the state's kinds through ``listwatch``, the rest through kopf.

Nodes, pods, Jobs, FabricTopologies and the DRA kinds (``controller.dra``: slices, taint rules,
claims, claim templates, device classes, ComputeDomains) go through ``listwatch`` (each initial
listing applied in one pass, then a watch): kopf's per-object readiness made startup quadratic
in the cluster's size. kopf still runs the process and watches Namespaces, for one signal: its first event
handler call means every ``@kopf.index`` handler registered here has seen its initial listing;
the same events tell ``controller.optin`` which namespaces carry the opt-in label.
The state is ``synced`` (readiness) once that and every informer listing are through
(``SyncGate``).

Nothing here writes to the watched objects: event handlers keep no progress or diff-base
annotations and add no finalizers (kopf only does that for change handlers). Handlers are
``async`` so they run on the event loop, never in kopf's thread pool: the state is not
thread-safe.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable
from typing import Any

import kopf

from fabricsched import listwatch
from fabricsched.api import topology as api
from fabricsched.controller import dra, kube, runtime

logger = logging.getLogger(__name__)

NAMESPACES = ("", "v1", "namespaces")


def kinds(rt: runtime.Runtime) -> list[listwatch.Kind]:
    """The kinds the state follows through ``listwatch`` (listed in one pass, then watched)."""
    cluster = rt.state
    return [
        listwatch.Kind("fabrictopology", f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}",
                      lambda b: cluster.apply_topology(listwatch.key_of(b)[1], b),
                      lambda k: cluster.delete_topology(k[1]), lambda: [("", n) for n in cluster.objects]),
        listwatch.Kind("node", "/api/v1/nodes", cluster.apply_node, lambda k: cluster.delete_node(k[1]),
                      lambda: [("", n) for n in cluster.nodes]),
        listwatch.Kind("job", "/apis/batch/v1/jobs", cluster.apply_job, lambda k: cluster.delete_job(*k),
                      lambda: list(cluster.jobs)),
        listwatch.Kind("pod", "/api/v1/pods", cluster.apply_pod, lambda k: cluster.delete_pod(*k),
                      lambda: list(cluster.pods)),
        *dra.kinds(cluster),
    ]


class SyncGate:
    """The state is ``synced`` once every part's initial listing is applied: each informer kind,
    and kopf (its first event handler call means its own index handlers saw their listings)."""

    KOPF = "kopf"

    def __init__(self, rt: runtime.Runtime, parts: Iterable[str]) -> None:
        self._rt = rt
        self._pending = {*parts, self.KOPF}

    def done(self, part: str) -> None:
        self._pending.discard(part)
        if not self._pending and not self._rt.state.synced:
            _mark_synced(self._rt)


def register(registry: kopf.OperatorRegistry, rt: runtime.Runtime, gate: SyncGate) -> None:
    """Add the operator's kopf handlers (and its login) to ``registry``."""

    @kopf.on.event(*NAMESPACES, id="sync-barrier", registry=registry)
    async def _barrier(body: kopf.Body, type: str | None, **_: Any) -> None:
        gate.done(SyncGate.KOPF)
        # The opt-in label: GPU pods of labelled namespaces that miss the webhook are reported.
        rt.state.optin.namespace_changed(body, deleted=type == "DELETED")

    @kopf.on.login(id="kubeconfig", registry=registry)
    def _login(**_: Any) -> kopf.ConnectionInfo:
        return kube.connection_info(rt.options.kubeconfig)


def _mark_synced(rt: runtime.Runtime) -> None:
    rt.state.mark_synced()
    # The initial listings are most of what the process will ever hold, and live as long as it:
    # out of the collector's sight, a full collection no longer walks them (at 10,000 nodes and
    # 50,000 pods that walk stalled the loop answering the scheduler for about half a second).
    gc.freeze()
    sizes = {"nodes": len(rt.state.nodes), "gpu pods": len(rt.state.pods), "jobs": len(rt.state.jobs),
             "topologies": len(rt.state.objects), "resource slices": len(rt.state.devices.slice_names()),
             "resource claims": len(rt.state.dra.claims.claims)}
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
