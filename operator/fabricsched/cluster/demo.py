"""``make demo`` (``fabricsched demo``): the product tour on a local control plane.

Flow of ``up``: stop a previous demo in the folder -> ``cluster up`` with the sample fabric and
the ``fabricsched`` scheduler -> CRDs and the FabricTopology -> ``fabricsched run`` in the
background, recorded in the cluster's state file so ``down`` stops it with the rest -> its
/readyz and the topology's first status -> the sample Jobs one at a time, each bound before the
next is submitted (the extender plans gangs in the order their first pods arrive: one at a time,
the tour tells the same story every run; kwok runs the bound pods) -> the report (``tour``) ->
the last act (``degradation``): a host under the widest job degraded, explain before and after.
The cluster is left running for ``kubectl``.

Imports no controller or extender module: the operator runs as its own process, as in a cluster.
"""

from __future__ import annotations

import argparse
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabricsched.api import schedconfig
from fabricsched.api import topology as topology_api
from fabricsched.cluster import (
    components,
    controlplane,
    degradation,
    demo_jobs,
    demo_workloads,
    errors,
    processes,
    rest,
    tour,
)
from fabricsched.ports import errors as api_errors

OPERATOR = "fabricsched"
"""Component name of ``fabricsched run`` in the state file and its log (``logs/fabricsched.log``)."""
PID_FILE = "fabricsched.pid"
JOB_NAME_LABEL = tour.JOB_NAME_LABEL


@dataclass(frozen=True)
class DemoOptions:
    """Paths are relative to the working folder (``make demo`` runs from the repository root)."""

    dir: Path = Path(".cluster")
    nodes: Path = Path("examples/demo-nodes.yaml")
    topology: Path = Path("examples/demo-topology.yaml")
    crds: Path = Path("crds")
    jobs: Path = Path("examples/demo-jobs")
    """Job manifests, submitted in file name order into ``namespace``."""
    namespace: str = "train"
    extender_address: str = "127.0.0.1:8888"
    """Where ``fabricsched run`` serves the extender; port 0, or a port in use, takes a free one."""
    health_address: str = "127.0.0.1:8081"
    """/healthz, /readyz, /metrics; port 0, or a port in use, takes a free one."""
    timeout: float = 90.0
    """Seconds each wait may take (cluster healthy, operator ready, one job bound)."""


@dataclass
class Tour:
    """A running demo: where it is, what landed where, and how long each step took."""

    dir: Path
    kubeconfig: Path
    kubectl: Path
    health_address: str
    extender_address: str
    namespace: str
    topology: dict[str, Any]
    placements: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    timings: dict[str, float]
    """Seconds per step: ``cluster``, ``operator``, ``jobs``, ``total``."""
    operator: processes.ProcessRecord
    """``fabricsched run``, as recorded in the cluster's state file."""
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    pod_group: dict[str, Any] | None = None
    """The native PodGroup gang's Bound FabricPlacement (the tour's non-Job workload)."""
    last_act: degradation.Degradation | None = None
    """The last act: a host under the widest job degraded, explain before and after."""

    def report(self) -> str:
        text = tour.render(self.placements, self.pods, self.nodes, self.topology)
        if self.pod_group is not None:
            text += "\n\n" + tour.pod_group_section(self.pod_group, self.pods, self.nodes, self.topology)
        return text

    def down(self) -> list[str]:
        """Stop this demo; returns the components that needed SIGKILL."""
        try:
            return down(self.dir)
        finally:
            self.reap()

    def reap(self) -> None:
        """Collect the exit status of our children once they were stopped (by ``down``, or by a
        rerun in the same folder, which stops its predecessor first)."""
        for child in self._children:
            child.wait()
        self._children.clear()


def _address(wanted: str) -> str:
    """``wanted`` when its port can be bound now, else the same host on a free port."""
    host, _, port = wanted.rpartition(":")
    if int(port) != 0:
        with socket.socket() as probe:
            try:
                probe.bind((host, int(port)))
                return wanted
            except OSError:
                pass
    return f"{host}:{processes.free_ports(1)[0]}"


def _kubectl(binary: Path, kubeconfig: Path, *args: str) -> str:
    result = subprocess.run([str(binary), f"--kubeconfig={kubeconfig}", *args], capture_output=True,
                            text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise errors.ClusterError(f"kubectl {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result.stdout


def _install_crds(api: rest.Client, folder: Path, timeout: float) -> None:
    """Create the CRDs in ``folder`` (a fresh cluster: no apply needed) and wait until they serve."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    names = []
    for file in sorted(folder.glob("*.yaml")):
        crd = yaml.safe_load(file.read_text(encoding="utf-8"))
        api.call("POST", path, crd)
        names.append(crd["metadata"]["name"])

    def established() -> bool:
        return all(
            any(c.get("type") == "Established" and c.get("status") == "True"
                for c in (api.call("GET", f"{path}/{name}").get("status") or {}).get("conditions") or [])
            for name in names
        )

    demo_jobs.wait(f"CRDs {', '.join(names)} to be established", established, timeout)


def _ready(address: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(f"http://{address}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
    return check


def _start_operator(layout: components.Layout, kubeconfig: Path, health: str, extender: str,
                    ) -> tuple[subprocess.Popen[bytes], processes.ProcessRecord]:
    argv = [sys.executable, "-m", "fabricsched.cli", "run", f"--kubeconfig={kubeconfig}",
            f"--health-address={health}", f"--extender-address={extender}"]
    child, record = processes.start(OPERATOR, argv, layout.log(OPERATOR))
    # Recorded with the control plane: `cluster down` (and `demo down`) stop it first.
    records, extra = processes.read_state(layout.state)
    processes.write_state(layout.state, [*records, record], extra)
    (layout.root / PID_FILE).write_text(f"{record.pid}\n")
    return child, record


def _check_inputs(options: DemoOptions) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The Jobs and the FabricTopology, read before anything starts."""
    jobs = demo_jobs.load_jobs(options.jobs)
    for path in (options.nodes, options.topology, options.crds):
        if not path.exists():
            raise errors.ClusterError(f"{path} not found: run the demo from the repository root")
    topology: dict[str, Any] = yaml.safe_load(options.topology.read_text(encoding="utf-8"))
    return jobs, topology


def _gpu_resources(topology: Mapping[str, Any]) -> list[str]:
    return [str((topology.get("spec") or {}).get("gpuResource") or schedconfig.DEFAULT_GPU_RESOURCE)]


def _start_fabricsched(api: rest.Client, plane: controlplane.ControlPlane, options: DemoOptions,
                       topology: Mapping[str, Any], health: str, extender: str, say: Callable[[str], None],
                       ) -> tuple[subprocess.Popen[bytes], processes.ProcessRecord]:
    """CRDs, the FabricTopology, then ``fabricsched run``; returns once it saw every node."""
    say(f"==> CRDs from {options.crds}/, FabricTopology from {options.topology}")
    _install_crds(api, options.crds, options.timeout)
    api.call("POST", f"/apis/{topology_api.API_VERSION}/{topology_api.PLURAL}", topology)
    say(f"==> fabricsched run (extender {extender}, health {health}); log in "
        f"{options.dir / 'logs' / (OPERATOR + '.log')}")
    child, operator = _start_operator(components.Layout(plane.dir), plane.kubeconfig, health, extender)
    demo_jobs.wait(f"fabricsched run /readyz on {health}", _ready(health), options.timeout, operator)
    name = topology["metadata"]["name"]

    def fabric_seen() -> bool:
        found = api.call("GET", _topology_path(name))
        status = found.get("status") or {}
        return bool(status.get("nodes") == len(plane.node_names)
                    and status.get("observedGeneration") == found["metadata"].get("generation"))

    demo_jobs.wait(f"FabricTopology {name} status with {len(plane.node_names)} nodes", fabric_seen,
          options.timeout, operator)
    return child, operator


def _topology_path(name: str) -> str:
    return f"/apis/{topology_api.API_VERSION}/{topology_api.PLURAL}/{name}"


def up(options: DemoOptions = DemoOptions(), say: Callable[[str], None] = print) -> Tour:
    """Start the demo from scratch (stopping a previous one in ``options.dir``) and run the tour."""
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    jobs, topology = _check_inputs(options)
    if down(options.dir):
        say("(stopped a previous demo; some components needed SIGKILL)")
    extender, health = _address(options.extender_address), _address(options.health_address)

    say(f"==> cluster up in {options.dir} with {options.nodes}")
    scheduler = components.fabricsched_scheduler(f"http://{extender}", gpu_resources=_gpu_resources(topology))
    plane = controlplane.up(options.dir, options.nodes, extra_schedulers=[scheduler],
                            options=controlplane.ControlPlaneOptions(timeout=options.timeout))
    children = list(plane._children)
    timings["cluster"] = time.monotonic() - t0
    api = plane.client()
    try:
        t = time.monotonic()
        child, operator = _start_fabricsched(api, plane, options, topology, health, extender, say)
        children.append(child)
        timings["operator"] = time.monotonic() - t
        t = time.monotonic()
        topology_path = _topology_path(topology["metadata"]["name"])
        placements, status = demo_jobs.place_jobs(
            api, options.namespace, options.timeout, jobs, topology_path, operator, say)

        def wait(what: str, check: Callable[[], Any]) -> Any:
            return demo_jobs.wait(what, check, options.timeout, operator)

        pod_group = demo_workloads.run_pod_group(api, options.namespace, wait)
        timings["jobs"] = time.monotonic() - t
        result = Tour(
            dir=plane.dir, kubeconfig=plane.kubeconfig, kubectl=plane.binaries.kubectl, health_address=health,
            extender_address=extender, namespace=options.namespace, topology=status, placements=placements,
            pods=demo_jobs.pods_of(api, options.namespace), nodes=api.call("GET", "/api/v1/nodes")["items"],
            timings=timings, operator=operator, _children=children, pod_group=pod_group,
        )
        result.last_act = _last_act(api, plane.kubeconfig, options, placements, operator, say)
    except BaseException:
        down(options.dir)
        for c in children:
            c.wait()
        raise
    finally:
        api.close()
    timings["total"] = time.monotonic() - t0
    return result


def _last_act(api: rest.Client, kubeconfig: Path, options: DemoOptions,
              placements: Sequence[Mapping[str, Any]], operator: processes.ProcessRecord,
              say: Callable[[str], None]) -> degradation.Degradation | None:
    say("==> Degrading a host under the widest running job, with fabricsched explain before and after")

    def wait(what: str, check: Callable[[], Any], timeout: float) -> Any:
        return demo_jobs.wait(what, check, timeout, operator)

    return degradation.run(api, kubeconfig, options.namespace, placements, wait, options.timeout)


def down(directory: Path) -> list[str]:
    """Stop the demo in ``directory`` (operator first, then the control plane); safe to repeat.

    Returns the components that needed SIGKILL.
    """
    killed = controlplane.down(directory)
    (directory / PID_FILE).unlink(missing_ok=True)
    return killed


def _epilogue(result: Tour, stop: str) -> str:
    topology = result.topology["metadata"]["name"]
    explore = [
        (f"export KUBECONFIG={shlex.quote(str(result.kubeconfig))}", ""),
        (f"export PATH={shlex.quote(str(result.kubectl.parent))}:$PATH", "the kubectl `make tools` built"),
        ("kubectl get fp -A", "FabricPlacements: every gang's plan"),
        (f"kubectl describe ft {topology}", "domains, degraded elements, Events"),
        (f"kubectl -n {result.namespace} get pods -o wide", ""),
        (f"kubectl -n {result.namespace} describe pod <pod>", "Events: FabricPlanned and the reasons"),
        (f"curl -s http://{result.health_address}/metrics | grep ^fabricsched_", ""),
        (f"less {shlex.quote(str(result.dir / 'logs' / (OPERATOR + '.log')))}", "the operator's log"),
    ]
    width = max(len(command) for command, _ in explore)
    lines = [f"  {command.ljust(width)}  # {note}" if note else f"  {command}" for command, note in explore]
    return "\n".join(["The cluster keeps running. Explore it:", *lines, f"Stop it: {stop}"])


def _print_tour(result: Tour, stop: str) -> None:
    print()
    print(result.report())
    print()
    print(f"$ kubectl get ft\n{_kubectl(result.kubectl, result.kubeconfig, 'get', 'ft').rstrip()}")
    print()
    if result.last_act is not None:
        print(result.last_act.render())
        print()
    print(_epilogue(result, stop))
    t = result.timings
    print(f"\nDemo ready in {t['total']:.1f} s (cluster {t['cluster']:.1f} s, operator ready "
          f"{t['operator']:.1f} s, jobs placed and bound {t['jobs']:.1f} s).")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="the product tour: a local cluster, the operator and three jobs",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(demo)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = DemoOptions()
    parser.add_argument("action", nargs="?", choices=("up", "down"), default="up",
                        help="up: (re)start the demo and run the tour; down: stop it (default: up)")
    parser.add_argument("--dir", type=Path, default=defaults.dir,
                        help="cluster folder (default: %(default)s)")
    for name in ("nodes", "topology", "crds", "jobs"):
        parser.add_argument(f"--{name}", type=Path, default=getattr(defaults, name),
                            help="(default: %(default)s)")
    parser.add_argument("--namespace", default=defaults.namespace, help="(default: %(default)s)")
    parser.add_argument("--extender-address", default=defaults.extender_address, metavar="HOST:PORT",
                        help="(default: %(default)s; a free port when taken)")
    parser.add_argument("--health-address", default=defaults.health_address, metavar="HOST:PORT",
                        help="(default: %(default)s; a free port when taken)")
    parser.add_argument("--timeout", type=float, default=defaults.timeout, help="(default: %(default)s)")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        if args.action == "down":
            killed = down(args.dir)
            note = f" (needed SIGKILL: {', '.join(killed)})" if killed else ""
            print(f"demo in {args.dir} stopped{note}")
            return 0
        result = up(DemoOptions(
            dir=args.dir, nodes=args.nodes, topology=args.topology, crds=args.crds, jobs=args.jobs,
            namespace=args.namespace, extender_address=args.extender_address,
            health_address=args.health_address, timeout=args.timeout,
        ))
        _print_tour(result, f"make demo-down  (or: fabricsched demo down --dir {shlex.quote(str(args.dir))})")
    except (errors.ClusterError, api_errors.ApiError, OSError, ValueError) as e:
        print(f"fabricsched demo {args.action}: error: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabricsched.cluster.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
