"""``up`` and ``down``: the local control plane's life cycle.

Flow of ``up``: validate the nodes file -> find binaries -> fresh PKI, kubeconfigs, scheduler
and kwok configurations -> start etcd and the API server together (the API server retries
etcd) -> once it is ready, start the controller manager, the schedulers and kwok (every
node's kubelet) -> wait until every one is healthy and the default ServiceAccount exists ->
create the nodes.
Any failure tears down what was started and raises an error that ends with the failing
component's log.
"""

from __future__ import annotations

import datetime
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricsched.cluster import binaries, certs, components, errors, kubeconfig, kwok, nodes, processes, rest

CLUSTER_NAME = "fabricsched"
KWOK = "kwok"
"""Component name of kwok (every node's kubelet) in the state file and its log."""


@dataclass(frozen=True)
class ControlPlaneOptions:
    timeout: float = 90.0
    """Seconds ``up`` waits for every component to become healthy."""
    stop_timeout: float = 10.0
    """Seconds ``down`` waits after SIGTERM before SIGKILL."""
    bin_dir: Path | None = None
    """Where the binaries are; default ``binaries.bin_dir()``."""
    node_lease_seconds: int = kwok.NODE_LEASE_SECONDS
    """Duration of the node Leases kwok renews (every quarter of it, as a kubelet); 0 = none.
    At thousands of nodes the renewals are most of the API server's write load."""


@dataclass
class ControlPlane:
    """A running cluster started by this process (the handle keeps the children reapable)."""

    dir: Path
    kubeconfig: Path
    ports: components.Ports
    binaries: binaries.Binaries
    timings: Mapping[str, float]
    """Seconds since ``up`` began: ``apiserver`` (ready), ``healthy`` (all components);
    ``nodes`` is the time creating nodes took; ``total``."""
    node_names: Sequence[str] = ()
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def client(self) -> rest.Client:
        return rest.Client.from_kubeconfig(self.kubeconfig)

    def stop_component(self, component: str, timeout: float = 10.0) -> None:
        """Stop one recorded component (SIGTERM, SIGKILL after ``timeout``): a fault to inject.
        Supervised components come back on their own; ``start_component`` restarts the others."""
        records, _ = processes.read_state(components.Layout(self.dir).state)
        processes.stop([_record(records, component)], timeout)

    def start_component(self, component: str) -> None:
        """Start a stopped component again with its recorded command line and log."""
        layout = components.Layout(self.dir)
        records, extra = processes.read_state(layout.state)
        old = _record(records, component)
        if processes.is_alive(old):
            raise errors.ClusterError(f"{component} is still running (pid {old.pid})")
        env = kwok.environment(layout.kwok_workdir) if component == KWOK else None
        child, record = processes.start(component, old.argv, Path(old.log), env)
        self._children.append(child)
        processes.write_state(layout.state, [record if r is old else r for r in records], extra)

    def down(self, options: ControlPlaneOptions = ControlPlaneOptions()) -> None:
        try:
            down(self.dir, options)
        finally:
            for child in self._children:
                child.wait()  # already stopped: this only reaps it
            self._children.clear()


def _record(records: Sequence[processes.ProcessRecord], component: str) -> processes.ProcessRecord:
    found = next((r for r in records if r.component == component), None)
    if found is None:
        raise errors.ClusterError(f"no component {component!r} in this cluster")
    return found


def _health_context() -> ssl.SSLContext:
    # Controller manager and schedulers serve /healthz with self-signed certificates made
    # in memory at start; on loopback, reaching the port is what the probe is about.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _healthz(port: int, context: ssl.SSLContext) -> Callable[[], bool]:
    url = f"https://127.0.0.1:{port}/healthz"

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
            return False
    return check


def _running(layout: components.Layout) -> list[processes.ProcessRecord]:
    if not layout.state.exists():
        return []
    records, _ = processes.read_state(layout.state)
    return [r for r in records if processes.is_alive(r)]


def _prepare(layout: components.Layout, specs: Sequence[components.SchedulerSpec],
             ports: components.Ports, now: datetime.datetime, lease_seconds: int) -> certs.Pki:
    # A fresh cluster each time: old etcd data would resurrect old objects.
    shutil.rmtree(layout.etcd_data, ignore_errors=True)
    shutil.rmtree(layout.logs, ignore_errors=True)
    shutil.rmtree(layout.kwok_workdir, ignore_errors=True)
    layout.logs.mkdir(parents=True)
    pki = certs.generate(layout.pki, now)
    server = f"https://127.0.0.1:{ports.apiserver}"
    kubeconfig.write(layout.admin_kubeconfig, server, pki.ca.cert, pki.admin, "admin", CLUSTER_NAME)
    kubeconfig.write(layout.kubeconfig("kube-controller-manager"), server, pki.ca.cert,
                     pki.controller_manager, "kube-controller-manager", CLUSTER_NAME)
    for spec in specs:
        config = kubeconfig.write(layout.kubeconfig(spec.component), server, pki.ca.cert, pki.scheduler,
                                  "kube-scheduler", CLUSTER_NAME)
        layout.scheduler_config(spec.component).write_text(spec.render(config, layout.root))
    components.write_kwok_config(layout, ports, lease_seconds)
    return pki


def _wait(description: str, check: Callable[[], bool], deadline: float,
          started: Sequence[processes.ProcessRecord], blame: str) -> None:
    """Poll ``check`` until true; fail early when any component exits."""
    while True:
        for record in started:
            # A supervised component that exits is restarted: during start-up it failed all the same.
            if not processes.is_alive(record) or processes.has_restarted(record):
                raise errors.ComponentFailed(
                    f"{record.component} exited while waiting for {description}; "
                    f"last lines of {record.log}:\n{processes.log_tail(record.log)}")
        if check():
            return
        if time.monotonic() > deadline:
            log = next((r.log for r in started if r.component == blame), "")
            raise errors.ComponentFailed(
                f"timed out waiting for {description}; last lines of {log}:\n{processes.log_tail(log)}")
        time.sleep(0.1)


def _api_ok(client: rest.Client, path: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            status, _ = client.request("GET", path)
        except OSError:  # not listening yet, or restarting
            return False
        return status == 200
    return check


def _allocate_ports(specs: Sequence[components.SchedulerSpec]) -> components.Ports:
    port_list = processes.free_ports(5 + len(specs))
    return components.Ports(
        etcd_client=port_list[0], etcd_peer=port_list[1], apiserver=port_list[2],
        controller_manager=port_list[3], kwok=port_list[4],
        schedulers={s.name: p for s, p in zip(specs, port_list[5:], strict=True)},
    )


def _kwok_ok(port: int) -> Callable[[], bool]:
    url = f"http://127.0.0.1:{port}/healthz"

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
    return check


def _await_controllers(client: rest.Client, ports: components.Ports,
                       specs: Sequence[components.SchedulerSpec], deadline: float,
                       records: Sequence[processes.ProcessRecord]) -> None:
    health = _health_context()
    _wait("kube-controller-manager /healthz", _healthz(ports.controller_manager, health),
          deadline, records, "kube-controller-manager")
    for spec in specs:
        _wait(f"{spec.component} /healthz", _healthz(ports.schedulers[spec.name], health),
              deadline, records, spec.component)
    _wait("kwok /healthz", _kwok_ok(ports.kwok), deadline, records, KWOK)
    _wait("the default ServiceAccount in namespace default",
          _api_ok(client, "/api/v1/namespaces/default/serviceaccounts/default"),
          deadline, records, "kube-controller-manager")


def up(directory: Path, nodes_file: Path | None = None,
       extra_schedulers: Sequence[components.SchedulerSpec] = (),
       options: ControlPlaneOptions = ControlPlaneOptions()) -> ControlPlane:
    """Start a fresh cluster in ``directory``; returns once it is healthy and holds the nodes."""
    t0 = time.monotonic()
    manifests = nodes.load(nodes_file) if nodes_file is not None else []
    specs = components.scheduler_specs(extra_schedulers)
    bins = binaries.find(options.bin_dir)
    directory = directory.resolve()
    layout = components.Layout(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if running := _running(layout):
        raise errors.ClusterError(
            f"a cluster already runs in {directory} ({', '.join(r.component for r in running)}); "
            f"stop it first: fabricsched cluster down --dir {directory}")

    ports = _allocate_ports(specs)
    now = datetime.datetime.now(datetime.UTC)
    pki = _prepare(layout, specs, ports, now, options.node_lease_seconds)
    state: dict[str, Any] = {"kubeconfig": str(layout.admin_kubeconfig), "ports": ports.as_dict(),
                             "started_at": now.isoformat()}
    # The controller manager and schedulers exit when their first requests are refused
    # (RBAC is bootstrapped only as the API server becomes ready): start them after.
    storage_and_api = [
        ("etcd", components.etcd(bins, layout, ports)),
        ("kube-apiserver", components.apiserver(bins, layout, ports, pki)),
    ]
    # Restarted whenever they exit (a scheduler exits when it loses its lease in an API
    # server outage); etcd and the API server are not, so a test can hold them down.
    controllers = [
        (component, processes.supervised(argv)) for component, argv in (
            ("kube-controller-manager", components.controller_manager(bins, layout, ports, pki)),
            *[(s.component, components.scheduler(bins, layout, ports, s)) for s in specs],
            (KWOK, components.kwok_argv(bins, layout)),
        )
    ]
    children: list[subprocess.Popen[bytes]] = []
    records: list[processes.ProcessRecord] = []
    timings: dict[str, float] = {}

    def start(batch: Sequence[tuple[str, list[str]]]) -> None:
        for component, argv in batch:
            env = kwok.environment(layout.kwok_workdir) if component == KWOK else None
            child, record = processes.start(component, argv, layout.log(component), env)
            children.append(child)
            records.append(record)
            processes.write_state(layout.state, records, state)

    try:
        deadline = time.monotonic() + options.timeout
        start(storage_and_api)
        with rest.Client.from_kubeconfig(layout.admin_kubeconfig) as client:
            _wait("kube-apiserver /readyz", _api_ok(client, "/readyz"), deadline, records, "kube-apiserver")
            timings["apiserver"] = time.monotonic() - t0
            start(controllers)
            _await_controllers(client, ports, specs, deadline, records)
            timings["healthy"] = time.monotonic() - t0
            names = nodes.create(client, manifests, now) if manifests else []
            timings["nodes"] = time.monotonic() - t0 - timings["healthy"]
    except BaseException:
        processes.stop(records, options.stop_timeout)
        for child in children:
            child.wait()
        layout.state.unlink(missing_ok=True)
        raise
    timings["total"] = time.monotonic() - t0
    return ControlPlane(dir=directory, kubeconfig=layout.admin_kubeconfig, ports=ports, binaries=bins,
                        timings=timings, node_names=names, _children=children)


def down(directory: Path, options: ControlPlaneOptions = ControlPlaneOptions()) -> list[str]:
    """Stop every process recorded in ``directory``; returns components that needed SIGKILL.

    Safe to repeat, and safe after a crashed ``up``: the state file lists every process
    that was started. The folder itself (logs, certificates) is kept for inspection.
    """
    layout = components.Layout(directory.resolve())
    if not layout.state.exists():
        return []
    records, _ = processes.read_state(layout.state)
    killed = processes.stop(records, options.stop_timeout)
    layout.state.unlink(missing_ok=True)
    return killed
