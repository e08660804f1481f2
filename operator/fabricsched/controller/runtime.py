"""What one ``fabricsched run`` process shares between its parts: options, state, clients.

The operator (kopf handlers, status reporter), the health server and the extender all get the
same ``Runtime``; nothing reads globals. The extender hooks in through
``fabricsched.extender.service.serve(runtime, address)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricsched import ids
from fabricsched.controller import events, metrics, state
from fabricsched.telemetry import access


@dataclass(frozen=True)
class Options:
    """``fabricsched run`` flags, validated by the command before the runtime is built."""

    kubeconfig: Path | None
    """None: the pod's service account (in-cluster configuration)."""
    health_address: str = "127.0.0.1:8081"
    """host:port of /healthz, /readyz and /metrics."""
    extender_address: str = "127.0.0.1:8888"
    """host:port the extender webhook listens on (when the extender is installed)."""
    lease_namespace: str = "kube-system"
    """Namespace for coordination Leases (kept for the extender and future leader election)."""
    events_namespace: str = "default"
    """Where Events about cluster-scoped objects (FabricTopology) are written."""
    log_format: str = "text"
    status_interval_s: float = 1.0
    """At most one status PATCH per FabricTopology per this many seconds."""
    tick_interval_s: float = 1.0
    """How often due health recoveries are applied (the hysteresis clock)."""
    locality_wait: str = "0s"
    """The extender's default wait for locality, a duration as given (``10m``); ``0s`` = off.
    The extender parses it (``extender.locality``): the feature is the extender's."""
    locality_tolerance: float = 0.05
    """A plan within floor x (1 + tolerance) starts at once (with the wait on)."""
    prometheus: access.Policy = field(default_factory=access.Policy)
    """Prometheus URLs topologies may name, and where their credential files may lie."""


@dataclass
class Runtime:
    """The process's shared parts. Built once by ``commands``; tests build their own."""

    options: Options
    state: state.ClusterState
    api: Any
    """A ``kubernetes.client.ApiClient`` bound to ``options.kubeconfig`` (sync; call it via
    ``asyncio.to_thread`` from the event loop)."""
    recorder: events.EventRecorder
    metrics: metrics.Metrics
    clock: Callable[[], float] = field(default=time.time)
    """Seconds since the epoch; the same clock the state dates health with."""
    reserved_gpus: Callable[[ids.TopologyName], Mapping[ids.NodeName, int]] | None = None
    """Set by the extender: GPUs per node held by plans whose pods are not bound yet, so the
    FabricTopology status ``gpus.free`` counts them as taken."""
