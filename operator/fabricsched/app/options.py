"""``fabricsched run``'s options: each part's own, side by side, validated before anything starts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricsched.controller import runtime
from fabricsched.dashboard import server as dashboard_server
from fabricsched.extender import service
from fabricsched.webhook import options as webhook_options

LOG_FORMATS = ("text", "json")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class LeaseOptions:
    """Where fabricsched's coordination Leases live (``--namespace-for-leases``): the Lease its
    replicas elect a writer of topology status, Events and plans with."""

    namespace: str = "kube-system"
    name: str = "fabricsched"
    elect: bool = False
    """``--leader-elect``: take part in the election (two replicas, the chart); off, this process
    is the only writer (``fabricsched cluster up``, one replica)."""

    def __post_init__(self) -> None:
        for what, value in (("namespace", self.namespace), ("name", self.name)):
            if not _DNS_LABEL.fullmatch(value):
                raise ValueError(f"lease {what} {value[:80]!r} is not a DNS-1123 label")


@dataclass(frozen=True)
class RunOptions:
    operator: runtime.OperatorOptions
    extender: service.ServiceOptions = field(default_factory=service.ServiceOptions)
    leases: LeaseOptions = field(default_factory=LeaseOptions)
    log_format: str = "text"
    dashboard: dashboard_server.DashboardOptions = field(default_factory=dashboard_server.DashboardOptions)
    """The fabric page (``--dashboard-address``; an empty address turns it off)."""
    webhook: webhook_options.WebhookOptions | None = None
    """The namespace opt-in webhook; None: not served (no certificate given)."""
    verbose: bool = False
    """``--verbose``: the front process logs as much as this one."""
    dashboard_diagnose: bool = True
    """The page's per-gang diagnosis (``--no-dashboard-diagnose`` turns it off)."""

    def __post_init__(self) -> None:
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"log format {self.log_format!r} is not one of {', '.join(LOG_FORMATS)}")
