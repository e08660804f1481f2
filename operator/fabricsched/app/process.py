"""One ``fabricsched run`` process, wired: the operator's runtime, the extender's service on
its state, and the views each gives the other.

    operator state ──StateView, Recorder──▶ extender service
    extender book  ──ReservedGpus────────▶ status reporter
    extender       ──Readiness───────────▶ /readyz
    both, in memory ─view.PageSource─────────▶ a snapshot per state version, over a pipe, to
                                           the front process: the fabric page and the
                                           namespace opt-in webhook (``front``, ``front_link``)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from fabricsched.api import admission
from fabricsched.app import dashboard, front, front_diagnose, front_link
from fabricsched.app import options as run_options
from fabricsched.controller import election, kube, running, runtime
from fabricsched.extender import service
from fabricsched.ports import views

logger = logging.getLogger(__name__)


def extender_for(rt: runtime.Runtime, options: service.ServiceOptions,
                 elector: election.LeaseElector | None = None) -> service.Service:
    """The extender on the operator's state, recorder, clock and metrics registry."""
    leading = elector.leading if elector is not None else _always
    return service.on_api(rt.state, rt.api, rt.recorder, rt.clock, options, rt.metrics.registry, leading)


def companions(
    extender: service.Service,
    front_process: front_link.Front | None = None,
    elector: election.LeaseElector | None = None,
) -> running.Companions:
    """What the operator's run gets of the extender (and of the front process, serving the
    webhook and the fabric page, and of the election, when they run)."""
    tasks: dict[str, Callable[[], running.Companion]] = {"extender": extender.run}
    readiness: list[views.Readiness] = [extender]
    if front_process is not None:
        tasks["front"] = front_process.run
        readiness.append(front_process)
    if elector is not None:
        tasks["leader election"] = elector.run
    return running.Companions(
        tasks=tasks,
        reserved=extender.reservations,
        gangs=extender.gangs_on_path,
        readiness=tuple(readiness),
        leading=elector.leading if elector is not None else None,
        optional=frozenset({"front"}),  # a page or webhook that cannot serve costs no decision
    )


def front_for(rt: runtime.Runtime, extender: service.Service,
              options: run_options.RunOptions) -> front_link.Front | None:
    """The front process (webhook and fabric page), or None when both are off."""
    diagnosis = None
    if options.dashboard.enabled and options.dashboard_diagnose:
        kubeconfig = options.operator.kubeconfig
        diagnosis = front_diagnose.PageDiagnosis(str(kubeconfig) if kubeconfig else None,
                                                 options.operator.prometheus)
    wanted = front.FrontOptions(options.webhook, options.dashboard, options.log_format, options.verbose,
                                diagnosis)
    if options.webhook is None:
        logger.info("namespace opt-in webhook off (no --webhook-cert-file)")
    else:
        logger.info("namespace opt-in webhook on https://%s%s", options.webhook.address, admission.PATH)
    if options.dashboard.enabled:
        logger.info("fabric page on http://%s/", options.dashboard.address)
    if not wanted.needed:
        return None
    source = dashboard.source(rt.state, extender) if options.dashboard.enabled else None
    return front_link.Front(wanted, source)


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
    await running.serve(rt, companions(extender, front_for(rt, extender, options), elector), stop_flag)
