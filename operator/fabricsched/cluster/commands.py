"""``fabricsched cluster up|down`` and ``fabricsched demo``: the local control plane from the command line."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fabricsched.api import admission as admission_contract
from fabricsched.api import schedconfig
from fabricsched.cluster import admission, components, controlplane, demo, errors
from fabricsched.ports import errors as api_errors

DEFAULT_EXTENDER_URL = schedconfig.DEFAULT_EXTENDER_URL
fabricsched_scheduler = components.fabricsched_scheduler
"""The second kube-scheduler (profile ``fabricsched``), for callers that start a cluster themselves."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser(
        "cluster", help="run a local control plane (etcd, kube-apiserver, controller manager, scheduler)",
        description="A local Kubernetes control plane as processes, for the demo and the tests. "
                    "Nodes come from a manifest file, with the conditions it declares; kwok plays "
                    "their kubelets.")
    actions = cluster.add_subparsers(dest="action", required=True)

    up = actions.add_parser("up", help="start a fresh cluster and return once it is healthy")
    up.add_argument("--dir", type=Path, required=True, help="folder for state, logs, certificates, etcd data")
    up.add_argument("--nodes", type=Path, metavar="FILE",
                    help="Node manifests to create (a List/NodeList or Node documents, as kubectl prints)")
    up.add_argument("--timeout", type=float, default=controlplane.ControlPlaneOptions.timeout,
                    help="seconds to wait for every component to become healthy (default: %(default)s)")
    up.add_argument("--extender-url", default=DEFAULT_EXTENDER_URL,
                    help="URL prefix of the fabricsched extender the second kube-scheduler "
                         "(profile fabricsched) calls (default: %(default)s)")
    up.add_argument("--gpu-resource", dest="gpu_resources", action="append", metavar="NAME",
                    help="a GPU resource name the extender manages (managedResources); repeat for "
                         "several; use the gpuResource of every FabricTopology you will create "
                         f"(default: {schedconfig.DEFAULT_GPU_RESOURCE})")
    up.add_argument("--dra", action="store_true",
                    help="GPUs come through DRA claims (a FabricTopology with spec.draGpus): the "
                         "second kube-scheduler lists no managedResources and sends every pod")
    up.add_argument("--node-lease-seconds", type=_lease_seconds,
                    default=controlplane.ControlPlaneOptions.node_lease_seconds,
                    help="duration of the node Leases kwok renews every quarter of it; 0: no Leases, "
                         "which spares the API server most of its writes at thousands of nodes "
                         "(default: %(default)s)")
    up.add_argument("--no-fabricsched-scheduler", dest="fabricsched_scheduler", action="store_false",
                    help="start only the default kube-scheduler")
    up.add_argument("--webhook-url", default=admission_contract.DEFAULT_URL, metavar="URL",
                    help="https://<loopback IP>:<port> where `fabricsched run` serves the namespace "
                         "opt-in webhook the cluster registers (default: %(default)s; docs/webhook.md)")
    up.add_argument("--no-webhook", dest="webhook", action="store_false",
                    help="register no namespace opt-in webhook")
    up.set_defaults(handler=_up)

    down = actions.add_parser("down", help="stop the cluster recorded in DIR/state.json")
    down.add_argument("--dir", type=Path, required=True)
    down.add_argument("--timeout", type=float, default=controlplane.ControlPlaneOptions.stop_timeout,
                      help="seconds between SIGTERM and SIGKILL per component (default: %(default)s)")
    down.set_defaults(handler=_down)

    demo.register(sub)


def _lease_seconds(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 6):
        raise argparse.ArgumentTypeError(f"expected whole seconds (0 for no Leases), got {text[:40]!r}")
    return int(text)


def _fail(action: str, error: Exception) -> int:
    print(f"fabricsched cluster {action}: error: {error}", file=sys.stderr)
    return 1


def _up(args: argparse.Namespace) -> int:
    try:
        resources = args.gpu_resources or [schedconfig.DEFAULT_GPU_RESOURCE]
        extra = [components.fabricsched_scheduler(args.extender_url, gpu_resources=resources,
                                                   dra=args.dra)] \
            if args.fabricsched_scheduler else []
        if args.webhook:
            admission.loopback_url(args.webhook_url)
        plane = controlplane.up(args.dir, args.nodes, extra_schedulers=extra,
                                options=controlplane.ControlPlaneOptions(timeout=args.timeout,
                                                             node_lease_seconds=args.node_lease_seconds))
    except (errors.ClusterError, api_errors.ApiError, ValueError) as e:
        return _fail("up", e)
    if args.webhook:
        try:
            with plane.client() as api:
                webhook = admission.register(plane.dir, api, args.webhook_url)
        except (errors.ClusterError, api_errors.ApiError, OSError, ValueError) as e:
            controlplane.down(plane.dir)
            return _fail("up", e)
        print(f"namespace opt-in webhook registered for {webhook.url}; serve it with: fabricsched run "
              + " ".join(shlex.quote(flag) for flag in webhook.run_flags()))
    timings = plane.timings
    print(f"cluster up in {timings['total']:.1f} s ({len(plane.node_names)} nodes created in "
          f"{timings.get('nodes', 0.0):.1f} s); logs in {plane.dir / 'logs'}")
    print(f"kubeconfig: {plane.kubeconfig}")
    print(f"export KUBECONFIG={shlex.quote(str(plane.kubeconfig))}")
    print(f"stop it with: fabricsched cluster down --dir {shlex.quote(str(plane.dir))}")
    return 0


def _down(args: argparse.Namespace) -> int:
    state = args.dir / "state.json"
    if not state.exists():
        print(f"no cluster recorded in {args.dir} (no state.json): nothing to stop")
        return 0
    try:
        killed = controlplane.down(args.dir, controlplane.ControlPlaneOptions(stop_timeout=args.timeout))
    except (errors.ClusterError, api_errors.ApiError, OSError, ValueError) as e:
        return _fail("down", e)
    note = f" (needed SIGKILL: {', '.join(killed)})" if killed else ""
    print(f"cluster in {args.dir} stopped{note}")
    return 0
