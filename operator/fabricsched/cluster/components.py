"""The command lines of the control plane components, and the files they read.

Pure functions of (binaries, folder layout, ports): unit tests check the flags without
starting anything. Flag choices and their reasons are listed in docs/cluster.md.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fabricsched.api import schedconfig
from fabricsched.cluster import binaries, certs, kwok

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

DISABLED_ADMISSION_PLUGINS = ("TaintNodesByCondition",)
"""Without a kubelet nobody would ever clear the not-ready taint this plugin puts on new nodes."""

DISABLED_CONTROLLERS = ("node-lifecycle-controller", "taint-eviction-controller")
"""A node's conditions are what its creator declared (a test's or the demo's input): the node
lifecycle controller would taint and evict on them, on its own clock."""

FEATURE_GATES: Mapping[str, bool] = {"GenericWorkload": True}
"""On for every component: the native gang API (Workload, PodGroup). ``WorkloadWithJob`` (alpha)
stays off, so a plain Job gets no PodGroup and keeps being a gang by fabricsched's own rules."""

API_SERVER_GATES: Mapping[str, bool] = {"TopologyAwareWorkloadScheduling": True}
"""On for the API server only (alpha since 1.36): it keeps a PodGroup's and a Workload template's
``schedulingConstraints`` (dropped with the gate off), which fabricsched reads as a required tier.
The kube-schedulers keep it off, so their own topology plugins stay out of the way."""
FIRST_TOPOLOGY_GATE_MINOR = 36

GANG_API_VERSIONS: Mapping[int, str] = {35: "v1alpha1", 36: "v1alpha2"}
"""Where Workload and PodGroup were served before 1.37 (``v1beta1`` from 1.37 on; 1.36 tested, 1.35
not tried). Beta and alpha
APIs are not served by default, and with the gate on the API server's own informers wait for
them: a wrong version keeps /readyz failing."""
FIRST_GANG_MINOR = 35


def gang_api_version(kube_version: str) -> str | None:
    """``scheduling.k8s.io`` version of the gang API at ``kube_version``; None before it existed."""
    minor = binaries.kubernetes_minor(kube_version)
    if minor < FIRST_GANG_MINOR:
        return None
    return GANG_API_VERSIONS.get(minor, "v1beta1")


def gang_flags(bins: binaries.Binaries, runtime_config: bool = False) -> list[str]:
    """The feature gates (and, for the API server, ``runtime_config``: its own gates and the
    runtime config) of the native gang API; each component gets its own list of gates."""
    version = gang_api_version(bins.kube_version)
    if version is None:
        return []
    gates = dict(FEATURE_GATES)
    if runtime_config and binaries.kubernetes_minor(bins.kube_version) >= FIRST_TOPOLOGY_GATE_MINOR:
        gates.update(API_SERVER_GATES)
    flags = [feature_gates_flag(gates)]
    if runtime_config:
        flags.append(f"--runtime-config=scheduling.k8s.io/{version}=true")
    return flags

DEFAULT_SCHEDULER_NAME = "default-scheduler"

DEFAULT_SCHEDULER_TEMPLATE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "$kubeconfig"
leaderElection:
  leaderElect: false
profiles:
- schedulerName: "$scheduler_name"
"""


@dataclass(frozen=True)
class SchedulerSpec:
    """One kube-scheduler process with its own KubeSchedulerConfiguration.

    ``config_template`` is rendered with ``string.Template``: ``$kubeconfig`` (the
    scheduler's own kubeconfig), ``$scheduler_name``, ``$dir`` (the cluster folder) and
    every key of ``params``. Leader election should stay off (or use a lease of its own):
    schedulers sharing a lease would wait for each other.
    """

    name: str
    """The ``schedulerName`` pods select; also names the process, its files and its logs."""
    config_template: str = DEFAULT_SCHEDULER_TEMPLATE
    params: Mapping[str, str] = field(default_factory=dict)
    renderer: Callable[[Path], str] | None = None
    """Renders the whole configuration from the scheduler's kubeconfig path, in place of the
    template (the fabricsched scheduler: the renderer the Helm chart is tested against)."""

    @property
    def component(self) -> str:
        if self.name == DEFAULT_SCHEDULER_NAME:
            return "kube-scheduler"
        return f"kube-scheduler-{self.name}"

    def render(self, kubeconfig_path: Path, cluster_dir: Path) -> str:
        if self.renderer is not None:
            return self.renderer(kubeconfig_path)
        values = {**self.params, "kubeconfig": str(kubeconfig_path), "scheduler_name": self.name,
                  "dir": str(cluster_dir)}
        return string.Template(self.config_template).substitute(values)


DEFAULT_SCHEDULER = SchedulerSpec(DEFAULT_SCHEDULER_NAME)


def fabricsched_scheduler(extender_url: str, lease_namespace: str = schedconfig.DEFAULT_LEASE_NAMESPACE,
                          gpu_resources: Sequence[str] = (schedconfig.DEFAULT_GPU_RESOURCE,),
                          dra: bool = False) -> SchedulerSpec:
    """The kube-scheduler that calls the extender, rendered exactly as the Helm chart's is.

    ``gpu_resources`` become ``managedResources``: the ``gpuResource`` of every FabricTopology
    the cluster will hold; with ``dra``, none (every pod is sent, docs/dra.md). Bad values raise
    ``ValueError`` here, before anything starts.
    """
    options = schedconfig.SchedulerConfigOptions(
        extender_url=extender_url, lease_namespace=lease_namespace, gpu_resources=tuple(gpu_resources),
        dra=dra)

    def render(kubeconfig_path: Path) -> str:
        return schedconfig.render(dataclasses.replace(options, kubeconfig=str(kubeconfig_path)))

    return SchedulerSpec(schedconfig.SCHEDULER_NAME, renderer=render)


@dataclass(frozen=True)
class Layout:
    """Where a cluster keeps its files, all under one folder."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    def kubeconfig(self, component: str) -> Path:
        return self.root / f"{component}.kubeconfig"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def scheduler_config(self, component: str) -> Path:
        return self.root / f"{component}.yaml"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    @property
    def kwok_workdir(self) -> Path:
        return self.root / "kwok"


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    schedulers: Mapping[str, int]
    """Secure (healthz) port of each scheduler, by scheduler name."""
    kwok: int = 0
    """kwok's plain HTTP /healthz on loopback."""

    def as_dict(self) -> dict[str, object]:
        return {"etcd_client": self.etcd_client, "etcd_peer": self.etcd_peer,
                "apiserver": self.apiserver, "controller_manager": self.controller_manager,
                "schedulers": dict(self.schedulers), "kwok": self.kwok}


def feature_gates_flag(gates: Mapping[str, bool] = FEATURE_GATES) -> str:
    return "--feature-gates=" + ",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))


def etcd(bins: binaries.Binaries, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(bins.etcd),
        "--name=fabricsched",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=fabricsched={peer}",
        # A throwaway cluster: durability buys nothing and fsync dominates write latency.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver(bins: binaries.Binaries, layout: Layout, ports: Ports, pki: certs.Pki) -> list[str]:
    return [
        str(bins.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        # Since 1.37 the endpoint reconciler refuses a loopback address; nothing in this cluster
        # reaches the API server through the `kubernetes` Service's endpoints anyway.
        "--endpoint-reconciler-type=none",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
        "--allow-privileged=true",
        "--profiling=false",
        *gang_flags(bins, runtime_config=True),
    ]


def controller_manager(bins: binaries.Binaries, layout: Layout, ports: Ports,
                       pki: certs.Pki) -> list[str]:
    config = layout.kubeconfig("kube-controller-manager")
    return [
        str(bins.kube_controller_manager),
        f"--kubeconfig={config}",
        f"--authentication-kubeconfig={config}",
        f"--authorization-kubeconfig={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        "--controllers=*," + ",".join(f"-{c}" for c in DISABLED_CONTROLLERS),
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.key}",
        "--cluster-name=fabricsched",
        "--leader-elect=false",
        "--profiling=false",
        # Tests create Jobs and wait for their pods: the default 20 QPS is the bottleneck.
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        *gang_flags(bins),
    ]


def scheduler(bins: binaries.Binaries, layout: Layout, ports: Ports, spec: SchedulerSpec) -> list[str]:
    config = layout.kubeconfig(spec.component)
    return [
        str(bins.kube_scheduler),
        f"--config={layout.scheduler_config(spec.component)}",
        f"--authentication-kubeconfig={config}",
        f"--authorization-kubeconfig={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.schedulers[spec.name]}",
        *gang_flags(bins),
    ]


def kwok_argv(bins: binaries.Binaries, layout: Layout) -> list[str]:
    """kwok as every node's kubelet; its configuration file is written by ``write_kwok_config``."""
    return kwok.argv(bins.kwok, layout.kwok_config, layout.admin_kubeconfig)


def write_kwok_config(layout: Layout, ports: Ports, lease_seconds: int = kwok.NODE_LEASE_SECONDS) -> None:
    layout.kwok_workdir.mkdir(parents=True, exist_ok=True)
    kwok.write_configuration(layout.kwok_config, f"127.0.0.1:{ports.kwok}", lease_seconds)


def scheduler_specs(extra: Sequence[SchedulerSpec]) -> tuple[SchedulerSpec, ...]:
    """The default scheduler first, then the extra ones; names must be unique."""
    specs = (DEFAULT_SCHEDULER, *extra)
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"scheduler names must be unique, repeated: {', '.join(duplicates)}")
    return specs
