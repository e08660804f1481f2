"""What the operator's parts share: options, state, clients.

The kopf handlers, the status reporter, the telemetry feed and the health server get the same
``Runtime``; nothing reads globals. The composition root (``fabricsched.app``) builds it and
hands its state and recorder to the extender through the seam's types (``fabricsched.ports``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from fabricsched.controller import events, metrics, state
from fabricsched.telemetry import access


@dataclass(frozen=True)
class OperatorOptions:
    """The operator's part of ``fabricsched run``'s flags, validated by the command."""

    kubeconfig: Path | None
    """None: the pod's service account (in-cluster configuration)."""
    health_address: str = "127.0.0.1:8081"
    """host:port of /healthz, /readyz and /metrics."""
    events_namespace: str = "default"
    """Where Events about cluster-scoped objects (FabricTopology) are written."""
    status_interval_s: float = 1.0
    """At most one status PATCH per FabricTopology per this many seconds."""
    api_compression: bool = False
    """Ask the API server to gzip its listings (``--api-compression``; ``listwatch.Connection``)."""
    prometheus: access.AccessPolicy = field(default_factory=access.AccessPolicy)
    """Prometheus URLs topologies may name, and where their credential files may lie."""


@dataclass
class Runtime:
    """The operator's shared parts. Built once by ``running.build``; tests build their own."""

    options: OperatorOptions
    state: state.ClusterState
    api: client.ApiClient
    """A ``kubernetes.client.ApiClient`` bound to ``options.kubeconfig`` (sync; call it via
    ``asyncio.to_thread`` from the event loop)."""
    recorder: events.EventRecorder
    metrics: metrics.Metrics
    clock: Callable[[], float] = field(default=time.time)
    """Seconds since the epoch; the same clock the state dates health with."""
