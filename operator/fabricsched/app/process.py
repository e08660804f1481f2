"""One ``fabricsched run`` process, wired: the operator's runtime, the extender's service on
its state, and the views each gives the other.

    operator state ──StateView, Recorder──▶ extender service
    extender book  ──ReservedGpus────────▶ status reporter
    extender       ──Readiness───────────▶ /readyz
"""

from __future__ import annotations

import asyncio
import logging

from fabricsched.app import options as run_options
from fabricsched.controller import election, kube, running, runtime
from fabricsched.extender import service

logger = logging.getLogger(__name__)


def extender_for(rt: runtime.Runtime, options: service.ServiceOptions,
                 elector: election.LeaseElector | None = None) -> service.Service:
    """The extender on the operator's state, recorder, clock and metrics registry."""
    leading = elector.leading if elector is not None else _always
    return service.on_api(rt.state, rt.api, rt.recorder, rt.clock, options, rt.metrics.registry, leading)


def companions(extender: service.Service, elector: election.LeaseElector | None = None) -> running.Companions:
    """What the operator's run gets of the extender (and of the election, when it runs)."""
    return running.Companions(
        tasks={"extender": extender.run, **({"leader election": elector.run} if elector else {})},
        reserved=extender.reservations,
        gangs=extender.gangs_on_path,
        readiness=(extender,),
        leading=elector.leading if elector is not None else None,
    )


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
    await running.serve(rt, companions(extender, elector), stop_flag)
