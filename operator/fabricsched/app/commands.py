"""``fabricsched run``: the operator and the extender in one process.

The flags, their defaults and their checks side by side; ``options_from`` turns them into
``options.RunOptions`` or a ValueError fit for the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from fabricsched.api import admission, schedconfig
from fabricsched.app import options as run_options
from fabricsched.controller import health_server, kube, logs, runtime
from fabricsched.dashboard import server as dashboard_server
from fabricsched.extender import service
from fabricsched.extender.decide import locality, preemption_options
from fabricsched.extender.http import tls as server_tls
from fabricsched.placement import request
from fabricsched.telemetry import access
from fabricsched.webhook import options as webhook_options

_DEFAULTS = runtime.OperatorOptions(kubeconfig=None)
_EXTENDER = service.ServiceOptions()
_LEASES = run_options.LeaseOptions()
_DASHBOARD = dashboard_server.DashboardOptions()
T = TypeVar("T")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run", help="run the operator: keep FabricTopology status current and serve the extender",
        description="Watch Nodes, Pods, Jobs and FabricTopologies; keep FabricTopology status, health "
                    "and Events current; serve /healthz, /readyz and /metrics, and the scheduler "
                    "extender.")
    run.add_argument("--kubeconfig", type=Path, default=None,
                     help="kubeconfig to use (default: $KUBECONFIG, else the pod's service account "
                          "when running in a cluster, else ~/.kube/config)")
    run.add_argument("--health-address", default=_DEFAULTS.health_address, metavar="HOST:PORT",
                     help="address of /healthz, /readyz and /metrics (default: %(default)s)")
    run.add_argument("--extender-address", default=_EXTENDER.address, metavar="HOST:PORT",
                     help="address of the scheduler extender (default: %(default)s)")
    run.add_argument("--dashboard-address", default=_DASHBOARD.address, metavar="HOST:PORT",
                     help="address of the read-only fabric page; '' turns it off (default: %(default)s; "
                          "see docs/dashboard.md)")
    run.add_argument("--no-dashboard-diagnose", dest="dashboard_diagnose", action="store_false",
                     help="do not serve a gang's diagnosis on the fabric page (/api/diagnose: API reads "
                          "and Prometheus queries from the page's process on demand; see docs/diagnose.md)")
    run.add_argument("--reservation-ttl", type=float, default=_EXTENDER.reservation_ttl_s, metavar="SECONDS",
                     help="let go of a plan's unbound ranks after this long without a newly bound one "
                          "(default: %(default)s)")
    run.add_argument("--max-reserved-gpus-per-namespace", type=int,
                     default=_EXTENDER.max_reserved_gpus_per_namespace, metavar="GPUS",
                     help="refuse a new gang plan that would put its namespace's reserved but unbound "
                          "GPUs over GPUS (default: %(default)s = no limit)")
    run.add_argument("--extender-max-body-bytes", type=int, default=_EXTENDER.max_body_bytes, metavar="BYTES",
                     help="largest extender request body; larger ones are refused (HTTP 400) "
                          "(default: %(default)s)")
    run.add_argument("--no-wake-ups", dest="wake_ups", action="store_false",
                     help="do not update the CSIStorageCapacity fabricsched-wakeup (in the leases' "
                          "namespace) when capacity frees; waiting gangs then retry on the "
                          "kube-scheduler's own clock (up to 5 minutes)")
    run.add_argument("--extender-tls-cert", type=Path, default=None, metavar="FILE",
                     help="serve the extender over HTTPS with this certificate (PEM); needs "
                          "--extender-tls-key and --extender-client-ca (default: plain HTTP)")
    run.add_argument("--extender-tls-key", type=Path, default=None, metavar="FILE",
                     help="private key of --extender-tls-cert (PEM)")
    run.add_argument("--extender-client-ca", type=Path, default=None, metavar="FILE",
                     help="answer only clients (the kube-scheduler) showing a certificate signed by "
                          "this CA (PEM)")
    run.add_argument("--namespace-for-leases", dest="lease_namespace", default=_LEASES.namespace,
                     help="namespace of fabricsched's coordination Lease (default: %(default)s)")
    run.add_argument("--leader-elect", action="store_true",
                     help="elect one writer among replicas with the Lease fabricsched in "
                          "--namespace-for-leases (15 s lease, 10 s renew deadline, 2 s retry); only "
                          "the holder writes topology status, Events and plan updates (default: off, "
                          "a single replica writes)")
    run.add_argument("--events-namespace", default=_DEFAULTS.events_namespace,
                     help="namespace for Events about cluster-scoped objects (default: %(default)s)")
    run.add_argument("--log-format", choices=run_options.LOG_FORMATS, default="text",
                     help="log line format (default: %(default)s)")
    run.add_argument("--status-interval", type=float, default=_DEFAULTS.status_interval_s, metavar="SECONDS",
                     help="least time between two status writes of one FabricTopology (default: %(default)s)")
    run.add_argument("--api-compression", action="store_true",
                     help="ask the API server to gzip listings of nodes, pods and the rest (default: "
                          "off, as the kube-scheduler: on a cluster's own network gzip costs the API "
                          "server and fabricsched CPU and lengthens the start; on for a slow link)")
    _add_placement_flags(run)
    _add_restart_flag(run)
    _add_preemption_flags(run)
    run.add_argument("--prometheus-allow-url", action="append", default=[], metavar="PREFIX",
                     help="a Prometheus URL prefix topologies may name in spec.health.prometheus.url "
                          "(http or https; repeat for more); a topology naming another URL is never "
                          "queried (default: none, telemetry off; see docs/telemetry.md)")
    run.add_argument("--prometheus-credentials-dir", action="append", default=None, metavar="DIR",
                     help="a directory spec.health.prometheus.access files may lie in (repeatable; "
                          f"default: {access.DEFAULT_CREDENTIALS_DIR})")
    run.add_argument("--verbose", action="store_true", help="debug logs, kopf's included")
    _add_webhook_flags(run)
    run.set_defaults(handler=_run)


def _add_placement_flags(run: argparse.ArgumentParser) -> None:
    run.add_argument("--locality-wait", default=locality.duration_text(locality.DEFAULT_WAIT.timeout_s),
                     metavar="DURATION",
                     help="hold a gang whose best placement now is more than --locality-tolerance above "
                          "its floor for up to DURATION (600s, 10m, 1h; 0s = off) waiting for a better one; "
                          "a gang's fabricsched.io/locality-wait annotation overrides it (see "
                          "docs/extender.md) (default: %(default)s)")
    run.add_argument("--locality-tolerance", type=float, default=locality.DEFAULT_WAIT.tolerance,
                     metavar="FRACTION",
                     help="a placement within floor x (1 + FRACTION) starts at once (default: %(default)s)")
    run.add_argument("--locality-hold-limit", type=float, default=locality.DEFAULT_WAIT.hold_limit,
                     metavar="TIMEOUTS",
                     help="the longest a gang is held in all, in timeouts, from its first hold: a held gang "
                          "that lost its fit is held afresh once it fits again, within this limit; 1 = one "
                          "hold only (default: %(default)s)")
    run.add_argument("--fit-order", choices=[o.value for o in request.FitOrder],
                     default=_EXTENDER.fit_order.value,
                     help="best fit's tie-break after health, tier and comm_slowdown: top-down, the "
                          "tightest domain at every tier, top tier first (docs/placement.md); holding, "
                          "only the room the holding domain has left (the older rule, kept to restore it) "
                          "(default: %(default)s)")


def _add_restart_flag(run: argparse.ArgumentParser) -> None:
    run.add_argument("--restart-placement", choices=service.RESTART_PLACEMENTS,
                     default=_EXTENDER.restart_placement,
                     help="previous: a gang whose whole group was restarted (a JobSet's failure policy, "
                          "a TrainJob, a LeaderWorkerSet) within an hour of its plan's release goes back "
                          "on its previous hosts, else in its previous domain, when that is as good as a "
                          "fresh plan; fresh: planned from scratch (docs/placement.md) "
                          "(default: %(default)s)")


def _add_preemption_flags(run: argparse.ArgumentParser) -> None:
    run.add_argument("--preemption", choices=("lower-priority", "off"), default="lower-priority",
                     help="lower-priority: a gang that fits nowhere evicts whole lower-priority workloads "
                          "inside one domain (docs/preemption.md); off: it waits (default: %(default)s)")
    run.add_argument("--preemption-rate", type=int, default=_EXTENDER.preemption.rounds_per_minute,
                     metavar="ROUNDS", help="most preemption rounds started per minute "
                                            "(default: %(default)s)")
    run.add_argument("--preemption-budgets", choices=preemption_options.BUDGET_SOURCES,
                     default=_EXTENDER.preemption.budgets_from,
                     help="watch: PodDisruptionBudgets and namespaces followed by watches, read from "
                          "memory at a decision; read: read from the API at each decision (the "
                          "behaviour before; docs/preemption.md) (default: %(default)s)")
    run.add_argument("--preemption-evict-kueue", action="store_true",
                     help="let Kueue-managed workloads be preemption victims (default: never; Kueue's "
                          "quota would leak)")


def _add_webhook_flags(run: argparse.ArgumentParser) -> None:
    run.add_argument("--webhook-address", default=admission.DEFAULT_ADDRESS, metavar="HOST:PORT",
                     help="HTTPS address of the namespace opt-in webhook (default: %(default)s; "
                          "see docs/webhook.md)")
    run.add_argument("--webhook-cert-file", type=Path, default=None, metavar="FILE",
                     help="PEM serving certificate of the webhook; the webhook is served only "
                          "when this and --webhook-key-file are given (default: none, webhook off)")
    run.add_argument("--webhook-key-file", type=Path, default=None, metavar="FILE",
                     help="PEM private key of --webhook-cert-file")
    run.add_argument("--webhook-gpu-resource", dest="webhook_gpu_resources", action="append",
                     metavar="NAME",
                     help="a pod requesting this resource is a GPU pod the webhook sends to "
                          "fabricsched; repeat for several; use the gpuResource of every "
                          f"FabricTopology (default: {schedconfig.DEFAULT_GPU_RESOURCE})")
    run.add_argument("--webhook-dra-claims", action="store_true",
                     help="a pod claiming DRA devices (spec.resourceClaims) is a GPU pod too: its "
                          "GPUs may come only from claims (docs/dra.md; default: off)")
    run.add_argument("--webhook-client-ca", type=Path, default=None, metavar="FILE",
                     help="answer only webhook clients (the API server, configured to present a "
                          "client certificate) showing a certificate signed by this CA (PEM) "
                          "(default: none, any TLS client)")


def _webhook_options(args: argparse.Namespace) -> webhook_options.WebhookOptions | None:
    if args.webhook_cert_file is None and args.webhook_key_file is None:
        return None
    if args.webhook_cert_file is None or args.webhook_key_file is None:
        raise ValueError("--webhook-cert-file and --webhook-key-file go together")
    return _flagged("--webhook", lambda: webhook_options.WebhookOptions(
        cert_file=args.webhook_cert_file, key_file=args.webhook_key_file, address=args.webhook_address,
        gpu_resources=tuple(args.webhook_gpu_resources or (schedconfig.DEFAULT_GPU_RESOURCE,)),
        client_ca=args.webhook_client_ca, dra_claims=args.webhook_dra_claims))


def resolve_kubeconfig(given: Path | None, environ: Mapping[str, str]) -> Path | None:
    """The kubeconfig to load, or None for the in-cluster service account (as client-go does:
    an explicit flag, then $KUBECONFIG, then the pod's credentials, then ~/.kube/config)."""
    if given is None and environ.get("KUBECONFIG"):
        given = Path(environ["KUBECONFIG"])
    if given is None and environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    kubeconfig = given or Path.home() / ".kube" / "config"
    if not kubeconfig.is_file():
        raise ValueError(f"kubeconfig {kubeconfig} does not exist")
    return kubeconfig


def options_from(args: argparse.Namespace) -> run_options.RunOptions:
    """Validated options; raises ValueError with a message fit for the command line."""
    kubeconfig = resolve_kubeconfig(args.kubeconfig, os.environ)
    try:
        health_server.split_address(args.health_address)
    except ValueError as e:
        raise ValueError(f"--health-address: {e}") from e
    if not args.status_interval > 0:
        raise ValueError("--status-interval must be greater than 0")
    return run_options.RunOptions(
        operator=runtime.OperatorOptions(
            kubeconfig=kubeconfig,
            health_address=args.health_address,
            events_namespace=args.events_namespace,
            status_interval_s=args.status_interval,
            api_compression=args.api_compression,
            prometheus=_flagged("--prometheus-allow-url", lambda: access.AccessPolicy.parse(
                args.prometheus_allow_url, args.prometheus_credentials_dir)),
        ),
        extender=_extender_options(args),
        leases=_flagged("--namespace-for-leases",
                        lambda: run_options.LeaseOptions(args.lease_namespace, elect=args.leader_elect)),
        log_format=args.log_format,
        dashboard=_flagged("--dashboard-address",
                           lambda: dashboard_server.DashboardOptions(args.dashboard_address)),
        webhook=_webhook_options(args),
        verbose=bool(getattr(args, "verbose", False)),
        dashboard_diagnose=bool(getattr(args, "dashboard_diagnose", True)),
    )


def _extender_options(args: argparse.Namespace) -> service.ServiceOptions:
    wait = locality.cluster_default(args.locality_wait, args.locality_tolerance, args.locality_hold_limit)
    _flagged("--extender-address", lambda: service.split_address(args.extender_address))
    _flagged("--reservation-ttl", lambda: service.ServiceOptions(reservation_ttl_s=args.reservation_ttl))
    _flagged("--extender-max-body-bytes",
             lambda: service.ServiceOptions(max_body_bytes=args.extender_max_body_bytes))
    _flagged("--max-reserved-gpus-per-namespace", lambda: service.ServiceOptions(
        max_reserved_gpus_per_namespace=args.max_reserved_gpus_per_namespace))
    tls = _flagged("--extender-tls-cert", lambda: _extender_tls(args))
    preemption = _flagged("--preemption-rate", lambda: preemption_options.PreemptionOptions(
        enabled=args.preemption == "lower-priority", rounds_per_minute=args.preemption_rate,
        evict_kueue=args.preemption_evict_kueue, budgets_from=args.preemption_budgets))
    return service.ServiceOptions(
        preemption=preemption,
        tls=tls,
        address=args.extender_address,
        max_reserved_gpus_per_namespace=args.max_reserved_gpus_per_namespace,
        # Waiting gangs are woken through an object in fabricsched's own namespace (its Leases').
        wake_namespace=args.lease_namespace if args.wake_ups else "",
        reservation_ttl_s=args.reservation_ttl,
        max_body_bytes=args.extender_max_body_bytes,
        locality_wait=wait,
        fit_order=request.FitOrder(args.fit_order),
        restart_placement=args.restart_placement,
        api_compression=args.api_compression,
    )


def _extender_tls(args: argparse.Namespace) -> server_tls.TLSFiles | None:
    files = (args.extender_tls_cert, args.extender_tls_key, args.extender_client_ca)
    if all(f is None for f in files):
        return None
    if any(f is None for f in files):
        raise ValueError("--extender-tls-cert, --extender-tls-key and --extender-client-ca go together")
    tls = server_tls.TLSFiles(*files)
    tls.context()
    return tls


def _flagged(flag: str, make: Callable[[], T]) -> T:
    """``make()``, its ValueError naming ``flag``."""
    try:
        return make()
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from e


def _run(args: argparse.Namespace) -> int:
    try:
        options = options_from(args)
    except ValueError as e:
        print(f"fabricsched run: error: {e}", file=sys.stderr)
        return 2
    logs.configure(options.log_format, args.verbose)
    # Imported here: kopf is heavy and `fabricsched --help` should stay quick.
    from fabricsched.app import process
    from fabricsched.controller import running

    try:
        asyncio.run(process.serve(options))
    except (kube.KubeconfigError, running.CompanionFailed) as e:
        print(f"fabricsched run: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
