"""``fabricsched run``: the operator (and the extender, when installed) in one process."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from fabricsched.controller import health_server, kube, logs, runtime
from fabricsched.telemetry import access

_DEFAULTS = runtime.Options(kubeconfig=None)
LOCALITY_MODULE = "fabricsched.extender.locality"
"""Parses the locality flags; loaded by name (the controller does not import the extender)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run", help="run the operator: keep FabricTopology status current and serve the extender",
        description="Watch Nodes, Pods, Jobs and FabricTopologies; keep FabricTopology status, health "
                    "and Events current; serve /healthz, /readyz and /metrics, and the scheduler "
                    "extender when it is installed.")
    run.add_argument("--kubeconfig", type=Path, default=None,
                     help="kubeconfig to use (default: $KUBECONFIG, else the pod's service account "
                          "when running in a cluster, else ~/.kube/config)")
    run.add_argument("--health-address", default=_DEFAULTS.health_address, metavar="HOST:PORT",
                     help="address of /healthz, /readyz and /metrics (default: %(default)s)")
    run.add_argument("--extender-address", default=_DEFAULTS.extender_address, metavar="HOST:PORT",
                     help="address of the scheduler extender (default: %(default)s)")
    run.add_argument("--namespace-for-leases", dest="lease_namespace", default=_DEFAULTS.lease_namespace,
                     help="namespace for coordination Leases (default: %(default)s)")
    run.add_argument("--events-namespace", default=_DEFAULTS.events_namespace,
                     help="namespace for Events about cluster-scoped objects (default: %(default)s)")
    run.add_argument("--log-format", choices=("text", "json"), default=_DEFAULTS.log_format,
                     help="log line format (default: %(default)s)")
    run.add_argument("--status-interval", type=float, default=_DEFAULTS.status_interval_s, metavar="SECONDS",
                     help="least time between two status writes of one FabricTopology (default: %(default)s)")
    run.add_argument("--locality-wait", default=_DEFAULTS.locality_wait, metavar="DURATION",
                     help="hold a gang whose best placement now is more than --locality-tolerance above "
                          "its floor for up to DURATION (600s, 10m, 1h) waiting for a better one; a "
                          "gang's fabricsched.io/locality-wait annotation overrides it (default: "
                          "%(default)s = off; see docs/extender.md)")
    run.add_argument("--locality-tolerance", type=float, default=_DEFAULTS.locality_tolerance,
                     metavar="FRACTION",
                     help="a placement within floor x (1 + FRACTION) starts at once (default: %(default)s)")
    run.add_argument("--prometheus-allow-url", action="append", default=[], metavar="PREFIX",
                     help="a Prometheus URL prefix topologies may name in spec.health.prometheus.url "
                          "(http or https; repeat for more); a topology naming another URL is never "
                          "queried (default: none, telemetry off; see docs/telemetry.md)")
    run.add_argument("--prometheus-credentials-dir", action="append", default=None, metavar="DIR",
                     help="a directory spec.health.prometheus.access files may lie in (repeatable; "
                          f"default: {access.DEFAULT_CREDENTIALS_DIR})")
    run.add_argument("--verbose", action="store_true", help="debug logs, kopf's included")
    run.set_defaults(handler=_run)


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


def options_from(args: argparse.Namespace) -> runtime.Options:
    """Validated options; raises ValueError with a message fit for the command line."""
    kubeconfig = resolve_kubeconfig(args.kubeconfig, os.environ)
    for flag, address in (("--health-address", args.health_address),
                          ("--extender-address", args.extender_address)):
        try:
            health_server.split_address(address)
        except ValueError as e:
            raise ValueError(f"{flag}: {e}") from e
    if not args.status_interval > 0:
        raise ValueError("--status-interval must be greater than 0")
    check_locality(args.locality_wait, args.locality_tolerance)
    prometheus = access.Policy.parse(args.prometheus_allow_url, args.prometheus_credentials_dir)
    return runtime.Options(
        kubeconfig=kubeconfig,
        health_address=args.health_address,
        extender_address=args.extender_address,
        lease_namespace=args.lease_namespace,
        events_namespace=args.events_namespace,
        log_format=args.log_format,
        status_interval_s=args.status_interval,
        locality_wait=args.locality_wait,
        locality_tolerance=args.locality_tolerance,
        prometheus=prometheus,
    )


def check_locality(wait: str, tolerance: float) -> None:
    """Fail at the command line on a locality flag the extender would refuse at start."""
    try:
        parser = importlib.import_module(LOCALITY_MODULE)
    except ModuleNotFoundError as e:
        if e.name != LOCALITY_MODULE:
            raise
        return  # no extender installed: nothing reads these flags
    parser.cluster_default(wait, tolerance)


def _run(args: argparse.Namespace) -> int:
    try:
        options = options_from(args)
    except ValueError as e:
        print(f"fabricsched run: error: {e}", file=sys.stderr)
        return 2
    logs.configure(options.log_format, args.verbose)
    # Imported here: kopf is heavy and `fabricsched --help` should stay quick.
    from fabricsched.controller import running

    try:
        asyncio.run(running.serve(options))
    except kube.KubeconfigError as e:
        print(f"fabricsched run: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
