"""Command lines and configuration files of the control plane components."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
import yaml

from fabricsched.api import schedconfig
from fabricsched.cluster import binaries, certs, components

BINS = binaries.Binaries(
    etcd=Path("/bin/etcd"), kube_apiserver=Path("/bin/kube-apiserver"),
    kube_controller_manager=Path("/bin/kube-controller-manager"), kube_scheduler=Path("/bin/kube-scheduler"),
    kubectl=Path("/bin/kubectl"), kwok=Path("/bin/kwok"), helm=None)
LAYOUT = components.Layout(Path("/c"))
PORTS = components.Ports(etcd_client=1, etcd_peer=2, apiserver=3, controller_manager=4,
                         schedulers={"default-scheduler": 5, "fabricsched": 6}, kwok=7)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> certs.Pki:
    return certs.generate(tmp_path_factory.mktemp("pki"), datetime.datetime.now(datetime.UTC))


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in argv[1:] if "=" in a)


def test_apiserver_keeps_nodes_free_of_the_not_ready_taint_and_binds_loopback(pki: certs.Pki) -> None:
    flags = _flags(components.apiserver(BINS, LAYOUT, PORTS, pki))
    assert flags["disable-admission-plugins"] == "TaintNodesByCondition"
    assert flags["bind-address"] == "127.0.0.1" and flags["secure-port"] == "3"
    assert flags["etcd-servers"] == "http://127.0.0.1:1"
    assert flags["authorization-mode"] == "RBAC"
    assert flags["service-account-signing-key-file"] == str(pki.service_account_key)


def test_controller_manager_runs_without_node_lifecycle_and_taint_eviction(pki: certs.Pki) -> None:
    flags = _flags(components.controller_manager(BINS, LAYOUT, PORTS, pki))
    assert flags["controllers"] == "*,-node-lifecycle-controller,-taint-eviction-controller"
    assert flags["use-service-account-credentials"] == "true"
    assert flags["kubeconfig"] == "/c/kube-controller-manager.kubeconfig"


def test_etcd_listens_on_loopback_without_fsync() -> None:
    argv = components.etcd(BINS, LAYOUT, PORTS)
    assert "--unsafe-no-fsync" in argv
    assert _flags(argv)["listen-client-urls"] == "http://127.0.0.1:1"


def test_each_scheduler_has_its_own_port_config_and_kubeconfig() -> None:
    extra = components.SchedulerSpec("fabricsched")
    default = _flags(components.scheduler(BINS, LAYOUT, PORTS, components.DEFAULT_SCHEDULER))
    second = _flags(components.scheduler(BINS, LAYOUT, PORTS, extra))
    assert (default["secure-port"], second["secure-port"]) == ("5", "6")
    assert default["config"] == "/c/kube-scheduler.yaml"
    assert second["config"] == "/c/kube-scheduler-fabricsched.yaml"
    assert second["authentication-kubeconfig"] == "/c/kube-scheduler-fabricsched.kubeconfig"


def test_default_scheduler_configuration_names_its_kubeconfig_and_profile() -> None:
    rendered = yaml.safe_load(components.DEFAULT_SCHEDULER.render(Path("/c/k.kubeconfig"), Path("/c")))
    assert rendered["kind"] == "KubeSchedulerConfiguration"
    assert rendered["clientConnection"]["kubeconfig"] == "/c/k.kubeconfig"
    assert rendered["leaderElection"]["leaderElect"] is False
    assert rendered["profiles"] == [{"schedulerName": "default-scheduler"}]


def test_an_extra_scheduler_template_gets_its_params() -> None:
    spec = components.SchedulerSpec("fabricsched", "url: $extender_url\nname: $scheduler_name\n",
                                    {"extender_url": "http://127.0.0.1:8888"})
    assert spec.render(Path("/k"), Path("/c")) == "url: http://127.0.0.1:8888\nname: fabricsched\n"


def test_a_template_placeholder_without_a_value_is_an_error() -> None:
    with pytest.raises(KeyError):
        components.SchedulerSpec("x", "url: $extender_url\n").render(Path("/k"), Path("/c"))


def test_scheduler_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="default-scheduler"):
        components.scheduler_specs([components.SchedulerSpec("default-scheduler")])
    assert [s.name for s in components.scheduler_specs([components.SchedulerSpec("b")])] == [
        "default-scheduler", "b"]


def test_every_component_runs_the_native_gang_api_and_the_api_server_serves_it(pki: certs.Pki) -> None:
    argvs = {
        "kube-apiserver": components.apiserver(BINS, LAYOUT, PORTS, pki),
        "kube-controller-manager": components.controller_manager(BINS, LAYOUT, PORTS, pki),
        "kube-scheduler": components.scheduler(BINS, LAYOUT, PORTS, components.DEFAULT_SCHEDULER),
        "kube-scheduler-fabricsched": components.scheduler(
            BINS, LAYOUT, PORTS, components.fabricsched_scheduler("http://127.0.0.1:8888")),
    }
    for component, argv in argvs.items():
        gates = dict(g.split("=") for g in _flags(argv)["feature-gates"].split(","))
        assert gates.get("GenericWorkload") == "true", component
        # Alpha, off: a plain Job must not get a PodGroup of its own.
        assert "WorkloadWithJob" not in gates, component
    assert _flags(argvs["kube-apiserver"])["runtime-config"] == "scheduling.k8s.io/v1beta1=true"


def test_only_the_api_server_keeps_the_native_topology_constraint(pki: certs.Pki) -> None:
    def gates(argv: list[str]) -> dict[str, str]:
        return dict(g.split("=") for g in _flags(argv)["feature-gates"].split(","))
    assert gates(components.apiserver(BINS, LAYOUT, PORTS, pki))["TopologyAwareWorkloadScheduling"] == "true"
    for argv in (components.controller_manager(BINS, LAYOUT, PORTS, pki),
                 components.scheduler(BINS, LAYOUT, PORTS, components.DEFAULT_SCHEDULER)):
        assert "TopologyAwareWorkloadScheduling" not in gates(argv)
    older = dataclasses.replace(BINS, kube_version="v1.35.3")
    assert "TopologyAwareWorkloadScheduling" not in gates(components.apiserver(older, LAYOUT, PORTS, pki))


def test_apiserver_on_loopback_runs_without_the_endpoint_reconciler(pki: certs.Pki) -> None:
    # Kubernetes 1.37 refuses a loopback advertise address with the endpoint reconciler on.
    flags = _flags(components.apiserver(BINS, LAYOUT, PORTS, pki))
    assert (flags["advertise-address"], flags["endpoint-reconciler-type"]) == ("127.0.0.1", "none")


def test_the_fabricsched_scheduler_is_rendered_by_the_charts_renderer() -> None:
    spec = components.fabricsched_scheduler("http://127.0.0.1:9999/", "ns",
                                            gpu_resources=["amd.com/gpu", "nvidia.com/gpu", "amd.com/gpu"])
    rendered = spec.render(Path("/c/s.kubeconfig"), Path("/c"))
    assert rendered == schedconfig.render(schedconfig.SchedulerConfigOptions(
        kubeconfig="/c/s.kubeconfig", extender_url="http://127.0.0.1:9999", lease_namespace="ns",
        gpu_resources=("amd.com/gpu", "nvidia.com/gpu")))
    [extender] = yaml.safe_load(rendered)["extenders"]
    assert extender["managedResources"] == [{"name": "amd.com/gpu", "ignoredByScheduler": False},
                                            {"name": "nvidia.com/gpu", "ignoredByScheduler": False}]


@pytest.mark.parametrize("names", [[], ["gpu"], ["nvidia.com/gpu\nx: y"], ["a" * 400 + "/gpu"]],
                         ids=["none", "no domain", "newline injected", "too long"])
def test_bad_gpu_resource_names_are_refused_before_anything_starts(names: list[str]) -> None:
    with pytest.raises(ValueError):
        components.fabricsched_scheduler("http://127.0.0.1:8888", gpu_resources=names)


def test_kwok_gets_its_own_loopback_health_port_and_the_cluster_kubeconfig() -> None:
    argv = components.kwok_argv(BINS, LAYOUT)
    assert argv[0] == "/bin/kwok"
    assert _flags(argv)["kubeconfig"] == "/c/kubeconfig" and _flags(argv)["config"] == "/c/kwok.yaml"
    assert PORTS.as_dict()["kwok"] == 7


@pytest.mark.parametrize(("release", "served"), [
    ("v1.37.2", "scheduling.k8s.io/v1beta1=true"), ("v1.38.0", "scheduling.k8s.io/v1beta1=true"),
    ("v1.36.3", "scheduling.k8s.io/v1alpha2=true"), ("v1.34.4", None),
], ids=["1.37: beta", "later: beta", "1.36: v1alpha2", "1.34: no gang API, no gate"])
def test_the_gang_api_is_served_where_each_release_has_it(pki: certs.Pki, release: str, served: str | None,
                                                           ) -> None:
    bins = dataclasses.replace(BINS, kube_version=release)
    flags = _flags(components.apiserver(bins, LAYOUT, PORTS, pki))
    assert flags.get("runtime-config") == served
    assert ("feature-gates" in flags) == (served is not None)
    assert ("feature-gates" in _flags(components.scheduler(bins, LAYOUT, PORTS, components.DEFAULT_SCHEDULER))
            ) == (served is not None)
