"""GPUs through DRA: a node's GPU devices, the ones allocated claims take, and a pod's claimed GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from fabricsched import ids, parsing
from fabricsched.api import dra as api
from fabricsched.topology import claims, dra, nodes

SPEC = api.DraGpuSpec()
NODE = ids.NodeName("gpu-001")
CONSTRAINTS = ("fabricsched.io/required-tier", "fabricsched.io/preferred-tier")


def _device(name: str, kind: str, counter: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "attributes": {"type": {"string": kind}, "uuid": {"string": name}}}
    if counter:
        body["consumesCounters"] = [{"counterSet": counter, "counters": {"memory": {"value": "1"}}}]
    return body


def _slice(generation: int = 1, gpus: int = 8, counters: bool = False, name: str = "s1") -> dict[str, Any]:
    devices = [_device(f"gpu-{i}", "gpu", f"gpu-{i}-counters" if counters else None) for i in range(gpus)]
    devices.append(_device("gpu-0-mig-9-4-4", "mig", "gpu-0-counters" if counters else None))
    devices.append(_device("gpu-vfio-0", "vfio"))
    return {"metadata": {"name": name}, "spec": {
        "driver": "gpu.nvidia.com", "nodeName": NODE,
        "pool": {"name": NODE, "generation": generation, "resourceSliceCount": 1}, "devices": devices}}


def _index(*bodies: dict[str, Any]) -> dra.DeviceIndex:
    index = dra.DeviceIndex()
    for body in bodies:
        index.set_slice(*dra.parse_slice(body))
    return index


def _node(allocatable: dict[str, str] | None = None) -> nodes.NodeInfo:
    return nodes.NodeInfo(NODE, {}, allocatable or {})


def test_whole_gpus_count_not_mig_or_vfio() -> None:
    assert claims.host_gpus(SPEC, "nvidia.com/gpu", _node(), _index(_slice())) == 8


def test_allocatable_wins_over_slices() -> None:
    # KEP-5004: a node with the extended resource allocatable is not counted again from slices.
    assert claims.host_gpus(SPEC, "nvidia.com/gpu", _node({"nvidia.com/gpu": "4"}), _index(_slice())) == 4
    assert claims.host_gpus(None, "nvidia.com/gpu", _node(), _index(_slice())) == 0


def test_only_the_pools_newest_generation_counts() -> None:
    index = _index(_slice(generation=1, gpus=8, name="old"), _slice(generation=2, gpus=4, name="new"))
    assert claims.host_gpus(SPEC, "nvidia.com/gpu", _node(), index) == 4
    index.remove_slice("new")
    assert claims.host_gpus(SPEC, "nvidia.com/gpu", _node(), index) == 8


def _allocation(*devices: str) -> claims.Allocation:
    return claims.Allocation(NODE, tuple(("gpu.nvidia.com", NODE, d) for d in devices))


def test_allocated_gpus_and_a_gpu_whose_mig_slice_is_allocated_are_taken() -> None:
    index = _index(_slice(counters=True))
    held = claims.ClaimIndex()
    assert claims.taken_gpus(SPEC, index, held, NODE) == 0
    assert held.set_claim(("ns", "a"), (), _allocation("gpu-3", "gpu-4")) == {NODE}
    assert claims.taken_gpus(SPEC, index, held, NODE) == 2
    held.set_claim(("ns", "b"), (), _allocation("gpu-0-mig-9-4-4"))
    assert claims.taken_gpus(SPEC, index, held, NODE) == 3  # gpu-0 shares its counter set
    assert held.remove_claim(("ns", "a")) == {NODE}
    assert claims.taken_gpus(SPEC, index, held, NODE) == 1


def test_allocation_is_read_from_the_claim_status() -> None:
    status = {"allocation": {
        "devices": {"results": [
            {"request": "r", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-1"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}
    assert claims.parse_allocation(status) == _allocation("gpu-1")
    assert claims.parse_allocation({}) is None


def _requests(*entries: dict[str, Any]) -> tuple[claims.Request, ...]:
    return claims.parse_requests({"devices": {"requests": list(entries)}}, "spec")


def _pod(claim_entries: list[dict[str, str]], limits: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> nodes.PodUsage:
    return nodes.PodUsage.from_manifest({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations or {}},
        "spec": {"resourceClaims": claim_entries,
                 "containers": [{"name": "c", "resources": {"limits": limits or {}}}]}})


def _fold(pod: nodes.PodUsage, held: claims.ClaimIndex, clique: str | None = None) -> nodes.PodUsage:
    return claims.fold(pod, [claims.DraFabric("nvidia.com/gpu", SPEC, clique)], held, CONSTRAINTS)


def test_a_pod_counts_the_gpus_its_template_asks_for() -> None:
    held = claims.ClaimIndex()
    held.set_template(("ns", "t"), _requests(
        {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}},
        {"name": "nic", "exactly": {"deviceClassName": "rdma.example.com", "count": 2}}))
    pod = _fold(_pod([{"name": "c", "resourceClaimTemplateName": "t"}]), held)
    assert (pod.gpus("nvidia.com/gpu"), pod.uncounted) == (8, "")


@pytest.mark.parametrize(("request_body", "why"), [
    ({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
     "allocationMode All"),
    ({"name": "g", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com", "count": 8}]},
     "firstAvailable"),
])
def test_claims_that_cannot_be_counted_are_never_zero(request_body: dict[str, Any], why: str) -> None:
    held = claims.ClaimIndex()
    held.set_claim(("ns", "c"), _requests(request_body), None)
    pod = _fold(_pod([{"name": "c", "resourceClaimName": "c"}]), held)
    assert why in pod.uncounted


def test_an_unknown_template_or_claims_and_limits_both_are_uncounted() -> None:
    held = claims.ClaimIndex()
    assert "not known" in _fold(_pod([{"name": "c", "resourceClaimTemplateName": "t"}]), held).uncounted
    held.set_template(("ns", "t"), _requests({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}))
    both = _fold(_pod([{"name": "c", "resourceClaimTemplateName": "t"}], {"nvidia.com/gpu": "1"}), held)
    assert "both" in both.uncounted


def test_implicit_device_class_requests_count() -> None:
    pod = _fold(_pod([], {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "4"}), claims.ClaimIndex())
    assert pod.gpus("nvidia.com/gpu") == 4


def test_a_compute_domain_channel_holds_the_gang_to_one_nvlink_domain() -> None:
    held = claims.ClaimIndex()
    held.set_template(("ns", "gpus"), _requests({"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                           "count": 4}}))
    held.set_template(("ns", "chan"), _requests({"name": "c", "exactly": {
        "deviceClassName": "compute-domain-default-channel.nvidia.com"}}))
    held.set_channel(("ns", "imex"), claims.channel_template_of(
        {"spec": {"channel": {"resourceClaimTemplate": {"name": "chan"}}}}))
    entries = [{"name": "g", "resourceClaimTemplateName": "gpus"},
               {"name": "c", "resourceClaimTemplateName": "chan"}]
    pod = _fold(_pod(entries), held, clique="nvlink")
    assert pod.annotations[CONSTRAINTS[0]] == "nvlink" and pod.gpus("nvidia.com/gpu") == 4
    own = _fold(_pod(entries, annotations={CONSTRAINTS[1]: "leaf"}), held, clique="nvlink")
    assert CONSTRAINTS[0] not in own.annotations  # the gang said otherwise


@pytest.mark.parametrize("bad", [
    {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "x", "count": "8"}}]}},
    {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "x", "count": 10**9}}]}},
    {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "x" * 300}}]}},
    {"devices": {"requests": "all"}},
])
def test_claims_are_parsed_strictly(bad: dict[str, Any]) -> None:
    with pytest.raises(parsing.Invalid):
        claims.parse_requests(bad, "spec")


def test_a_slice_generation_must_be_a_whole_number() -> None:
    body = _slice()
    body["spec"]["pool"]["generation"] = "1"
    with pytest.raises(parsing.Invalid):
        dra.parse_slice(body)
