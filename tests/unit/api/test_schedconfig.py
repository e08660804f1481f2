"""The second kube-scheduler's configuration: rendered values, and field names that exist in
the real kubescheduler.config.k8s.io/v1 types (read from the Go module cache when present)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabricsched.api import schedconfig

OPTIONS = schedconfig.SchedulerConfigOptions(
    kubeconfig="/run/fabricsched/scheduler.kubeconfig",
    extender_url="http://127.0.0.1:8888/",
    lease_namespace="fabricsched-system",
)


def rendered(options: schedconfig.SchedulerConfigOptions) -> dict[str, Any]:
    """The rendered configuration parsed back."""
    loaded = yaml.safe_load(schedconfig.render(options))
    assert isinstance(loaded, dict)
    return loaded


MODULES = Path(os.environ.get("GOMODCACHE", Path.home() / "go" / "pkg" / "mod")) / "k8s.io"
GO_TYPES = [
    MODULES / "kube-scheduler@v0.37.2" / "config" / "v1" / "types.go",
    MODULES / "component-base@v0.37.2" / "config" / "v1alpha1" / "types.go",
]


def test_the_profile_extender_and_lease_are_fabricscheds_own() -> None:
    config = rendered(OPTIONS)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["percentageOfNodesToScore"] == 100
    assert config["clientConnection"]["kubeconfig"] == "/run/fabricsched/scheduler.kubeconfig"
    lease = config["leaderElection"]
    assert (lease["leaderElect"], lease["resourceName"], lease["resourceNamespace"]) == (
        True,
        "fabricsched-scheduler",
        "fabricsched-system",
    )
    # kube-scheduler's defaults, written out (docs/install.md states them).
    assert (lease["leaseDuration"], lease["renewDeadline"], lease["retryPeriod"]) == ("15s", "10s", "2s")
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "fabricsched"
    # Off at every extension point: 1.37 runs it at podGroupPostFilter too (docs/preemption.md).
    assert profile["plugins"] == {"multiPoint": {"disabled": [{"name": "DefaultPreemption"}]}}
    (extender,) = config["extenders"]
    assert extender == {
        "urlPrefix": "http://127.0.0.1:8888",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": 5,
        "nodeCacheCapable": True,
        "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
        "httpTimeout": "10s",
        "ignorable": False,
        "enableHTTPS": False,
        "tlsConfig": None,
    }


def test_mutual_tls_names_the_ca_and_the_schedulers_client_pair_as_the_charts_tojson_prints() -> None:
    tls = schedconfig.ExtenderTLS("/etc/fabricsched-tls/ca.crt", "/etc/fabricsched-tls/tls.crt",
                                  "/etc/fabricsched-tls/tls.key")
    options = schedconfig.SchedulerConfigOptions(extender_url="https://127.0.0.1:8888", tls=tls)
    (extender,) = rendered(options)["extenders"]
    assert extender["urlPrefix"] == "https://127.0.0.1:8888" and extender["enableHTTPS"] is True
    files = {"caFile": tls.ca_file, "certFile": tls.cert_file, "keyFile": tls.key_file}
    assert extender["tlsConfig"] == files
    assert tls.as_json() == ('{"caFile":"/etc/fabricsched-tls/ca.crt",'
                             '"certFile":"/etc/fabricsched-tls/tls.crt","keyFile":"/etc/fabricsched-tls/tls.key"}')


def test_managed_resources_follow_the_gpu_resource_names_in_order_without_repeats() -> None:
    names = ("amd.com/gpu", "nvidia.com/gpu", "amd.com/gpu")
    options = schedconfig.SchedulerConfigOptions(gpu_resources=names)
    (extender,) = rendered(options)["extenders"]
    assert extender["managedResources"] == [
        {"name": "amd.com/gpu", "ignoredByScheduler": False},
        {"name": "nvidia.com/gpu", "ignoredByScheduler": False},
    ]
    # What the chart's toJson prints for the same list: keys sorted, no spaces.
    expected = '[{"ignoredByScheduler":false,"name":"nvidia.com/gpu"}]'
    assert schedconfig.managed_resources(["nvidia.com/gpu"]) == expected


@pytest.mark.parametrize("names", [(), ("gpu",), ('nvidia.com/gpu"}]\nx: [{"',), ("Nvidia.com/gpu",)],
                         ids=["none", "no domain", "quote injection", "upper-case domain"])
def test_bad_gpu_resource_names_are_refused(names: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        schedconfig.SchedulerConfigOptions(gpu_resources=names)


def test_values_with_quotes_cannot_break_the_yaml() -> None:
    tricky = schedconfig.SchedulerConfigOptions(kubeconfig='/tmp/a "b"\\c.yaml')
    assert rendered(tricky)["clientConnection"]["kubeconfig"] == '/tmp/a "b"\\c.yaml'


@pytest.mark.parametrize(
    "changes",
    [{"extender_url": "127.0.0.1:8888"}, {"lease_namespace": ""}, {"extender_url": "https://127.0.0.1:8888"},
     {"tls": schedconfig.ExtenderTLS("ca", "crt", "key")}],
    ids=["extender url without scheme", "empty lease namespace", "https without TLS files",
         "TLS files with an http URL"],
)
def test_invalid_options_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        schedconfig.SchedulerConfigOptions(**changes)


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


@pytest.mark.skipif(
    not all(p.exists() for p in GO_TYPES), reason="k8s.io Go modules v0.37.2 not in the cache"
)
def test_every_field_name_exists_in_the_kube_scheduler_v1_37_config_types() -> None:
    tags = set()
    for path in GO_TYPES:
        tags |= set(re.findall(r'json:"([A-Za-z]+)[,"]', path.read_text(encoding="utf-8")))
    config = rendered(OPTIONS)
    unknown = _keys(config) - tags - {"apiVersion", "kind"}
    assert not unknown, f"not fields of kubescheduler.config.k8s.io/v1: {sorted(unknown)}"


def test_with_dra_no_managed_resources_so_every_pod_is_sent() -> None:
    options = schedconfig.SchedulerConfigOptions(dra=True)
    extender = yaml.safe_load(schedconfig.render(options))["extenders"][0]
    assert extender["managedResources"] == []
