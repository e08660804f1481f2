"""From the job's objects (``cluster.read``) to ``model.DiagnosisInputs``: the step-time
annotation, then the telemetry from the Prometheus chosen by the caller, or a note saying why
it was not measured. Shared by the CLI (``commands``: ``--prometheus`` and its own credential
flags) and the fabric page (``from_topology``: the topology's ``spec.health.prometheus`` under
``fabricsched run``'s access policy, as its health rules use it).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricsched.api import topology as topology_api
from fabricsched.diagnose import appmetric, cluster, model, nodes, queries, signals, timefmt
from fabricsched.explain import bounds
from fabricsched.telemetry import access, prometheus

log = logging.getLogger("fabricsched.diagnose")


@dataclass(frozen=True)
class Asking:
    """Which Prometheus to ask and with what, or why none is asked."""

    spec: topology_api.PrometheusHealthSpec | None
    """Where and how (URL, credentials, TLS); None: telemetry is not measured."""
    policy: access.AccessPolicy
    """What the credentials and the URL must satisfy (``access.Resolver``)."""
    why: str = ""
    """Without ``spec``: why no Prometheus is asked, for the report's notes."""
    url: str | None = None
    """Without ``spec`` but with a URL: it was named but cannot be asked (every signal says so)."""


def from_topology(read: cluster.Read, policy: access.AccessPolicy) -> Asking:
    """The page's choice: the job's FabricTopology's ``spec.health.prometheus``, which the
    resolver asks only when ``policy`` (``--prometheus-allow-url``, the credential directories)
    admits its URL and files."""
    named = read.topology_prometheus
    if not named:
        return Asking(None, policy, "the job's FabricTopology names no Prometheus (spec.health.prometheus)")
    if not policy.allowed:
        return Asking(None, policy, "fabricsched run allows no Prometheus URL (--prometheus-allow-url)")
    try:
        spec = topology_api.PrometheusHealthSpec.model_validate(dict(named))
    except ValueError as e:
        url = bounds.text(named, "url", 2048) or None
        return Asking(None, policy, f"spec.health.prometheus is not valid: {bounds.clean(e, 200)}", url)
    return Asking(spec, policy)


async def inputs(
    read: cluster.Read,
    window: model.Window,
    labels: Sequence[nodes.NodeLabel],
    asking: Asking,
    deadline_s: float,
) -> model.DiagnosisInputs:
    """The report's inputs; every Prometheus failure is in them (a partial report), never raised."""
    notes = list(read.notes)
    app: appmetric.AppMetric | None = None
    try:
        app = appmetric.from_annotations(read.annotations)
    except ValueError as e:
        notes.append(f"the step-time annotation is ignored: {bounds.clean(e, 200)}")
    job = dataclasses.replace(read.job, app_metric=app.text if app else None)
    base = model.DiagnosisInputs(
        job=job,
        window=window,
        changes=read.changes,
        notes=tuple(notes),
        application_higher_is_better=bool(app and app.higher_is_better),
    )
    if asking.spec is None:
        if asking.url is not None:
            return _not_asked(base, asking.url, asking.why)
        log.info("no Prometheus: %s", asking.why)
        return dataclasses.replace(base, notes=(*base.notes, f"telemetry not measured: {asking.why}"))
    hosts = [r.node for r in job.gang.ranks] if job.gang else []
    pod_nodes = {p.name: p.node for p in job.pods if p.node}
    target = queries.Target(job.namespace, hosts, pod_nodes, labels)
    async with prometheus.PrometheusClient(asking.policy) as client:
        try:
            endpoint = client.endpoint(asking.spec)
        except prometheus.TelemetryError as e:
            return _not_asked(base, asking.spec.url, e.message)
        log.info("asking %s about %d hosts over %s", endpoint.url, len(hosts), _span(window))
        measured, app_measured = await queries.gather(client, endpoint, target, window, app, deadline_s)
    return dataclasses.replace(base, prometheus=endpoint.url, telemetry=measured, application=app_measured)


def _not_asked(base: model.DiagnosisInputs, url: str, why: str) -> model.DiagnosisInputs:
    return dataclasses.replace(
        base,
        prometheus=url,
        telemetry=tuple(model.Measured(s.key, error=why) for s in signals.SIGNALS),
        notes=(*base.notes, f"Prometheus not asked: {why}"),
    )


def _span(window: model.Window) -> str:
    return f"{timefmt.rfc3339(window.start)}..{timefmt.rfc3339(window.end)} every {window.step_s:g} s"


def named_url(prometheus_spec: Mapping[str, Any] | None) -> str:
    """The URL a topology's ``spec.health.prometheus`` names (bounded), "" when none."""
    return bounds.text(prometheus_spec, "url", 2048) if prometheus_spec else ""
