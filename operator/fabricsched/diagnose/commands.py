"""``fabricsched diagnose NAMESPACE/NAME`` and ``fabricsched diagnose-scenario``: arguments, the
Prometheus to ask, exit codes.

Exit codes: 0 a report was printed (also a partial one: Prometheus down, slow or answering
garbage is in the report, not an exit code), 1 not found, 2 usage, 3 cannot reach or read the API
server. Logs go to stderr; the report alone to stdout.

Which Prometheus: ``--prometheus URL`` is used as given. Without it, the job's FabricTopology's
``spec.health.prometheus.url`` is used only when it lies under a ``--prometheus-allow-url``
prefix: a topology's writer must not make the command send your credentials elsewhere. The
credentials and TLS are this command's own flags (the topology's files are the operator's).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path

from fabricsched.api import prometheus_access as access_api
from fabricsched.api import topology as topology_api
from fabricsched.diagnose import cluster, collect, model, nodes, queries, render, report, scenarios, timefmt
from fabricsched.explain import access as kube_access
from fabricsched.explain import bounds
from fabricsched.explain import commands as explain_commands
from fabricsched.ports import errors
from fabricsched.telemetry import access, prometheus

FOUND, NOT_FOUND, USAGE, NO_API = 0, 1, 2, 3
DEFAULT_SINCE = "1h"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "diagnose",
        help="why is this job slow: the fabric, a GPU, the host, storage, scheduling or the application",
        description="Diagnose a slow training job over a time window: its path and health changes, its "
        "nodes side by side, interface counters and GPU, host and storage telemetry from Prometheus, "
        "recent changes, and the causes ranked with their evidence. Exit codes: 0 a report (also a "
        "partial one), 1 not found, 2 usage, 3 cannot reach or read the API server.",
    )
    parser.add_argument("target", metavar="NAMESPACE/NAME", help="the workload or the FabricPlacement")
    parser.add_argument("-n", "--namespace", help="namespace when NAME is given alone")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--since", metavar="DURATION", help=f"the window ending now (default {DEFAULT_SINCE})")
    when.add_argument("--from", dest="start", metavar="RFC3339", help="the window's start (with --to)")
    parser.add_argument("--to", dest="end", metavar="RFC3339", help="the window's end (with --from)")
    parser.add_argument("-o", "--output", choices=render.FORMATS, default="text")
    parser.add_argument("--prometheus", metavar="URL", help="the Prometheus to ask, used as given")
    parser.add_argument(
        "--prometheus-allow-url",
        action="append",
        default=[],
        metavar="URL",
        help="a URL prefix the topology's spec.health.prometheus may name (repeatable)",
    )
    parser.add_argument("--bearer-token-file", help="file holding a bearer token for Prometheus")
    parser.add_argument("--basic-auth-user", help="basic auth user (with --basic-auth-password-file)")
    parser.add_argument("--basic-auth-password-file")
    parser.add_argument("--ca-file", help="PEM CAs to trust for an https:// Prometheus")
    parser.add_argument("--cert-file", help="PEM client certificate (mutual TLS)")
    parser.add_argument("--key-file", help="PEM key of --cert-file")
    parser.add_argument("--insecure-skip-tls-verify", action="store_true")
    parser.add_argument(
        "--node-label",
        action="append",
        default=[],
        metavar="LABEL[=REGEX]",
        help="labels naming a series' node, in order (default: node, instance=host part, "
        "Hostname, kubernetes_node)",
    )
    parser.add_argument(
        "--prometheus-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="time budget of all Prometheus queries together",
    )
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    parser.add_argument("--request-timeout", type=float, default=10.0, metavar="SECONDS")
    parser.set_defaults(handler=run)
    _register_scenario(sub)


def _window(args: argparse.Namespace, now: float) -> model.Window:
    if args.start or args.end:
        start, end = timefmt.parse(args.start), timefmt.parse(args.end)
        if start is None or end is None:
            raise ValueError("--from and --to are both needed, as RFC 3339 times (2025-01-31T10:00:00Z)")
        if not start < end or end - start > timefmt.MAX_DURATION_S:
            raise ValueError("--from must be before --to, at most 31 days apart")
        return queries.window_of(start, end)
    return queries.window_of(now - timefmt.duration(args.since or DEFAULT_SINCE), now)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    target = explain_commands.target_of(args)
    try:
        if target is None:
            raise ValueError(f"expected NAMESPACE/NAME, got {bounds.clean(args.target, 100)!r}")
        window = _window(args, time.time())
        labels = [nodes.NodeLabel.parse(v) for v in args.node_label] or list(nodes.DEFAULT_LABELS)
    except ValueError as e:
        print(f"error: {bounds.clean(e, 300)}", file=sys.stderr)
        return USAGE
    try:
        api = kube_access.connect(args.kubeconfig, args.context, args.request_timeout)
        try:
            namespace, name = target
            read = cluster.read(api, namespace or api.namespace, name, window)
        finally:
            api.close()
    except errors.NotFound as e:
        print(f"error: {bounds.clean(e)}", file=sys.stderr)
        return NOT_FOUND
    except kube_access.ApiAccessError as e:
        print(f"error: {bounds.clean(e, 400)}", file=sys.stderr)
        return NO_API
    except Exception as e:  # whatever else the transport raises: still one line
        print(
            f"error: cannot read the API server: {type(e).__name__}: {bounds.clean(e, 300)}", file=sys.stderr
        )
        return NO_API
    inputs = asyncio.run(collect.inputs(read, window, labels, _asking(args, read), args.prometheus_timeout))
    sys.stdout.write(render.render(report.build(inputs), args.output))
    return FOUND


def _asking(args: argparse.Namespace, read: cluster.Read) -> collect.Asking:
    """``--prometheus`` as given, else the topology's URL when an allow-list prefix admits it;
    the credentials and TLS always from this command's flags."""
    url, why = _url(args, read)
    if url is None:
        return collect.Asking(None, access.AccessPolicy((), ()), why)
    policy = _policy(args, url)
    try:
        return collect.Asking(_spec(args, url), policy)
    except prometheus.TelemetryError as e:
        return collect.Asking(None, policy, e.message, url)


def _url(args: argparse.Namespace, read: cluster.Read) -> tuple[str | None, str]:
    if args.prometheus:
        return str(args.prometheus), "given"
    named = collect.named_url(read.topology_prometheus)
    if not named:
        return None, "no --prometheus, and the job's FabricTopology names none (spec.health.prometheus)"
    try:
        access.AccessPolicy.parse(args.prometheus_allow_url, []).check_url(named)
    except (ValueError, access.AccessError) as e:
        return None, (
            f"the FabricTopology names {named}, which no --prometheus-allow-url admits "
            f"({bounds.clean(str(e), 160)})"
        )
    return named, "allowed"


def _policy(args: argparse.Namespace, url: str) -> access.AccessPolicy:
    files = [
        f
        for f in (
            args.bearer_token_file,
            args.basic_auth_password_file,
            args.ca_file,
            args.cert_file,
            args.key_file,
        )
        if f
    ]
    dirs = sorted({os.path.dirname(os.path.abspath(f)) for f in files})
    try:
        return access.AccessPolicy.parse([url], dirs)
    except ValueError:
        return access.AccessPolicy((), ())  # the resolver then says the URL is not usable, in the report


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def _spec(args: argparse.Namespace, url: str) -> topology_api.PrometheusHealthSpec:
    try:
        tls = access_api.PrometheusTLSSpec(
            ca_file=_absolute(args.ca_file),
            cert_file=_absolute(args.cert_file),
            key_file=_absolute(args.key_file),
            insecure_skip_verify=args.insecure_skip_tls_verify,
        )
        basic = (
            access_api.BasicAuthSpec(
                username=args.basic_auth_user, password_file=_absolute(args.basic_auth_password_file)
            )
            if args.basic_auth_user
            else None
        )
        spec = access_api.PrometheusAccessSpec(
            bearer_token_file=_absolute(args.bearer_token_file), basic_auth=basic, tls=tls
        )
        return topology_api.PrometheusHealthSpec(url=url, access=spec)
    except ValueError as e:
        raise prometheus.TelemetryError("config", f"the Prometheus flags: {bounds.clean(e, 300)}") from e


def _register_scenario(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "diagnose-scenario",
        help="write a scenario's telemetry history (OpenMetrics) to try diagnose with",
        description="Write one scenario's node_exporter, dcgm-exporter and step-time history as OpenMetrics "
        "with timestamps; backfill it with `promtool tsdb create-blocks-from openmetrics FILE DIR`. "
        f"Scenarios: {', '.join(scenarios.SCENARIOS)}.",
    )
    parser.add_argument("scenario", choices=scenarios.SCENARIOS)
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        required=True,
        metavar="HOST=LEAF",
        help="a host of the job and its leaf, in rank order (repeat)",
    )
    parser.add_argument(
        "--pod",
        action="append",
        default=[],
        metavar="HOST=NAMESPACE/POD",
        help="the job's pod on a host (repeat): GPU pod labels and the step time",
    )
    parser.add_argument("--end", metavar="RFC3339", help="the history's last point (default now)")
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--step", type=int, default=15, metavar="SECONDS")
    parser.add_argument("-o", "--output", metavar="FILE", help="default stdout")
    parser.set_defaults(handler=run_scenario)


def run_scenario(args: argparse.Namespace) -> int:
    end = timefmt.parse(args.end) if args.end else time.time()
    try:
        if end is None:
            raise ValueError("--end must be an RFC 3339 time")
        text = scenarios.generate(
            args.scenario, scenarios.layout_from(args.host, args.pod), end, args.minutes, args.step
        )
    except ValueError as e:
        print(f"error: {bounds.clean(e, 300)}", file=sys.stderr)
        return USAGE
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return FOUND
