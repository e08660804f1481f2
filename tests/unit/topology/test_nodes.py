from __future__ import annotations

import pytest

import builders
from fabricsched.topology import nodes, quantities


@pytest.mark.parametrize(("text", "expected"), [
    ("8", 8), ("1k", 1000), ("2Ki", 2048), ("500m", 1), ("1E3", 1000), ("0", 0), (4, 4),
], ids=["a plain count", "a decimal suffix", "a binary suffix", "a milli value rounds up",
        "an exponent is not exa", "zero", "an integer from YAML"])
def test_quantities_parse_as_kubernetes_does(text: str | int, expected: int) -> None:
    assert quantities.to_int(text) == expected


@pytest.mark.parametrize("text", ["", "eight", "1e", "nan"],
                         ids=["empty", "a word", "a dangling exponent", "not a number"])
def test_malformed_quantities_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantities.parse(text)


def test_node_manifest_reads_labels_gpus_and_conditions() -> None:
    # A cordon is the kube-scheduler's to honour: the fabric keeps the host.
    info = (builders.make_node("gpu-1").leaf("l1").gpus(8).unschedulable()
            .condition("FabricLinkDegraded", True, "symbol errors on mlx5_2").info())
    assert info.name == "gpu-1"
    assert info.labels[builders.TOPOGRAPH.format(0)] == "l1"
    assert info.gpus("nvidia.com/gpu") == 8
    assert info.gpus("amd.com/gpu") == 0
    assert info.conditions["FabricLinkDegraded"].status == "True"
    assert info.conditions["FabricLinkDegraded"].message == "symbol errors on mlx5_2"


def test_unparsable_gpu_quantity_counts_as_no_gpus() -> None:
    assert builders.make_node("n").allocatable("nvidia.com/gpu", "lots").info().gpus("nvidia.com/gpu") == 0


@pytest.mark.parametrize(("pod", "expected"), [
    (builders.make_pod("p").gpus(8), 8),
    (builders.make_pod("p").gpus(4).container(2), 6),
    (builders.make_pod("p").gpus(2).init_container(8), 8),
    (builders.make_pod("p").gpus(2).init_container(1, sidecar=True).init_container(4), 5),
    (builders.make_pod("p").gpus(2).init_container(1, sidecar=True), 3),
    (builders.make_pod("p").gpus(8, limit_only=True), 8),
    (builders.make_pod("p"), 0),
], ids=["one container", "app containers add up", "an init container peak wins over a smaller sum",
        "a sidecar adds to the init containers after it", "a sidecar adds to the app containers",
        "an extended resource given only as a limit is requested", "no GPU request"])
def test_pod_requests_follow_kube_scheduler_accounting(pod: builders.PodBuilder, expected: int) -> None:
    assert pod.usage().gpus("nvidia.com/gpu") == expected


def test_pod_requests_keep_only_extended_resources() -> None:
    usage = builders.make_pod("p").gpus(1).container(0).usage()
    assert "cpu" not in usage.requests


@pytest.mark.parametrize(("pod", "active"), [
    (builders.make_pod("p").gpus(8), False),
    (builders.make_pod("p").gpus(8).on("n1"), True),
    (builders.make_pod("p").gpus(8).on("n1").phase("Succeeded"), False),
    (builders.make_pod("p").gpus(8).on("n1").phase("Failed"), False),
    (builders.make_pod("p").gpus(8).on("n1").terminating(), True),
    (builders.make_pod("p").gpus(8).on("n1").terminating(containers_done=True), False),
], ids=["pending and unbound", "bound and running", "succeeded", "failed",
        "terminating with containers still running", "terminating with every container done"])
def test_pod_is_active_while_it_holds_its_node(pod: builders.PodBuilder, active: bool) -> None:
    assert pod.usage().active is active


def test_pod_manifest_reads_owner_and_gang_metadata() -> None:
    usage = (builders.make_pod("b-0", "train").gpus(8).on("n1").job("b", "uid-b", index=0)
             .scheduler("fabricsched").usage())
    assert usage.owner == ("Job", "b", "uid-b")
    assert usage.labels["batch.kubernetes.io/job-completion-index"] == "0"
    assert usage.scheduler_name == "fabricsched"
    assert usage.namespace == "train"
    assert usage.node == "n1"


def test_a_pod_with_scheduling_gates_is_gated() -> None:
    body = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"schedulingGates": [{"name": "example.com/hold"}]}, "status": {}}
    assert nodes.PodUsage.from_manifest(body).gated
    body["spec"] = {"schedulingGates": []}
    assert not nodes.PodUsage.from_manifest(body).gated
