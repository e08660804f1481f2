"""``fabricsched explain NAMESPACE/NAME``: argument parsing and the exit codes.

0 found, 1 not found, 2 usage (argparse's own), 3 cannot reach or read the API server. Every
failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from fabricsched.explain import access, bounds, reader, render, report
from fabricsched.ports import errors

FOUND, NOT_FOUND, USAGE, NO_API = 0, 1, 2, 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "explain",
        help="why a gang is placed where it is, or why it waits; its path's health and Events",
        description="Explain a training workload (Job, JobSet, PyTorchJob, MPIJob, LeaderWorkerSet, "
        "TrainJob) or a FabricPlacement: its plan, phase and reasons, each rank's host and domains, "
        "the unhealthy elements on its path, and the recent Events. Reads only the API server. "
        "Exit codes: 0 found, 1 not found, 2 usage, 3 cannot reach or read the API server.",
    )
    parser.add_argument("target", metavar="NAMESPACE/NAME", help="the workload or the FabricPlacement")
    parser.add_argument(
        "-n",
        "--namespace",
        help="namespace when NAME is given alone (default: the kubeconfig context's, else default)",
    )
    parser.add_argument("-o", "--output", choices=render.FORMATS, default="text")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--request-timeout", type=float, default=10.0, metavar="SECONDS")
    parser.set_defaults(handler=run)


def target_of(args: argparse.Namespace) -> tuple[str | None, str] | None:
    """(namespace, name); namespace None when neither the target nor ``-n`` names one (the
    kubeconfig context's namespace is used then, as kubectl does)."""
    namespace, _, name = str(args.target).rpartition("/")
    namespace = namespace or args.namespace
    if not name or "/" in (namespace or "") or (args.namespace and namespace != args.namespace):
        return None
    return namespace, name


def run(args: argparse.Namespace) -> int:
    target = target_of(args)
    if target is None:
        print(f"error: expected NAMESPACE/NAME, got {bounds.clean(args.target, 100)!r}", file=sys.stderr)
        return USAGE
    try:
        api = access.connect(args.kubeconfig, args.context, args.request_timeout)
        namespace, name = target
        try:
            objects = reader.fetch(api, namespace or api.namespace, name)
        finally:
            api.close()
    except errors.NotFound as e:  # neither a FabricPlacement nor a known workload of that name
        print(f"error: {bounds.clean(e)}", file=sys.stderr)
        return NOT_FOUND
    except access.ApiAccessError as e:
        print(f"error: {bounds.clean(e, 400)}", file=sys.stderr)
        return NO_API
    except Exception as e:  # whatever else the transport raises: still one line
        print(
            f"error: cannot read the API server: {type(e).__name__}: {bounds.clean(e, 300)}",
            file=sys.stderr,
        )
        return NO_API
    sys.stdout.write(render.render(report.build(objects), args.output))
    return FOUND
