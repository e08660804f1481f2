"""One ``fabricsched run`` process, wired: the operator's runtime, the extender's service on
its state, and the views each gives the other.

    operator state ──StateView, Recorder──▶ extender service
    extender book  ──ReservedGpus────────▶ status reporter
    extender       ──Readiness───────────▶ /readyz
    both, in memory ─view.PageSource─────────▶ the fabric page (``dashboard``; --dashboard-address)
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from fabricsched.api import admission
from fabricsched.app import dashboard
from fabricsched.app import options as run_options
from fabricsched.controller import election, kube, running, runtime
from fabricsched.dashboard import server as dashboard_server
from fabricsched.extender import service
from fabricsched.webhook import options as webhook_options
from fabricsched.webhook import server as webhook_server

logger = logging.getLogger(__name__)


def extender_for(rt: runtime.Runtime, options: service.ServiceOptions,
                 elector: election.LeaseElector | None = None) -> service.Service:
    """The extender on the operator's state, recorder, clock and metrics registry."""
    leading = elector.leading if elector is not None else _always
    return service.on_api(rt.state, rt.api, rt.recorder, rt.clock, options, rt.metrics.registry, leading)


def companions(
    extender: service.Service,
    webhook: webhook_options.WebhookOptions | None = None,
    page: Callable[[], running.Companion] | None = None,
    elector: election.LeaseElector | None = None,
) -> running.Companions:
    """What the operator's run gets of the extender (and of the webhook, the fabric page and the
    election, when they run)."""
    tasks: dict[str, Callable[[], running.Companion]] = {"extender": extender.run}
    if page is not None:
        tasks["dashboard"] = page
    if elector is not None:
        tasks["leader election"] = elector.run
    return running.Companions(
        tasks=tasks,
        reserved=extender.reservations,
        gangs=extender.gangs_on_path,
        readiness=(extender,),
        kopf_parts=webhook_parts(webhook),
        leading=elector.leading if elector is not None else None,
        optional=frozenset({"dashboard"}),  # a page that cannot listen costs no decision
    )


def webhook_parts(webhook: webhook_options.WebhookOptions | None) -> tuple[running.KopfPart, ...]:
    """kopf's admission handler and server for the namespace opt-in; none without a certificate."""
    if webhook is None:
        logger.info("namespace opt-in webhook off (no --webhook-cert-file)")
        return ()
    logger.info("namespace opt-in webhook on https://%s%s", webhook.address, admission.PATH)
    return (functools.partial(webhook_server.install, options=webhook),)


def elector_for(rt: runtime.Runtime, leases: run_options.LeaseOptions) -> election.LeaseElector | None:
    """The Lease election of ``--leader-elect`` (kube-scheduler's default timings), or None."""
    if not leases.elect:
        return None
    return election.LeaseElector(rt.api, election.ElectionOptions(
        namespace=leases.namespace, name=leases.name, identity=election.default_identity()))


def _always() -> bool:
    return True


async def serve(options: run_options.RunOptions, stop_flag: asyncio.Event | None = None) -> None:
    """Run the operator and the extender until a signal or ``stop_flag``."""
    api = kube.api_client(options.operator.kubeconfig)
    rt = running.build(options.operator, api)
    elector = elector_for(rt, options.leases)
    extender = extender_for(rt, options.extender, elector)
    if elector is not None:
        logger.info("extender on %s; leader election on Lease %s/%s as %s", options.extender.address,
                    options.leases.namespace, options.leases.name, elector.options.identity)
    else:
        logger.info("extender on %s; the only writer (no --leader-elect)", options.extender.address)
    page = _page(rt, extender, options.dashboard)
    await running.serve(rt, companions(extender, options.webhook, page, elector), stop_flag)


def _page(
    rt: runtime.Runtime, extender: service.Service, options: dashboard_server.DashboardOptions
) -> Callable[[], running.Companion] | None:
    """The fabric page's task on the process's state, or None when it is off."""
    if not options.enabled:
        return None
    source = dashboard.source(rt.state, extender)
    logger.info("fabric page on http://%s/", options.address)
    return functools.partial(dashboard_server.serve, source, options)
