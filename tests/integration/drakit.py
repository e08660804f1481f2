"""GPUs through DRA on the real control plane: ResourceSlices published for kwok nodes as NVIDIA's
DRA driver publishes them, its DeviceClasses, claim templates, ComputeDomains, and reading back
what the kube-scheduler allocated.

The devices follow github.com/NVIDIA/k8s-dra-driver-gpu: ``cmd/gpu-kubelet-plugin/deviceinfo.go``
(``GetDevice``: a whole GPU ``gpu-<minor>`` with string attributes type=gpu, uuid, productName,
brand, architecture, pcieBusID, addressingMode and version attributes cudaComputeCapability,
driverVersion, cudaDriverVersion, capacity memory; a MIG device ``gpu-<minor>-mig-<profile>-
<start>-<size>`` with type=mig, parentUUID, profile), its DeviceClass ``gpu.nvidia.com``
(``device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'``),
and its ComputeDomain CRD (``deployments/helm/nvidia-dra-driver-gpu/crds/``) with the channel
DeviceClass ``compute-domain-default-channel.nvidia.com`` over devices of driver
``compute-domain.nvidia.com`` with type=channel and id. No attribute here is invented.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
from waiting import wait_for

from fabricsched.cluster import rest, samples

RESOURCE = "/apis/resource.k8s.io/v1"
GPU_DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CLIQUE = "nvidia.com/gpu.clique"
_GPU_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
_CHANNEL_SELECTOR = ("device.driver == 'compute-domain.nvidia.com' && "
                     "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
                     "device.attributes['compute-domain.nvidia.com'].id == 0")


def _s(value: str) -> dict[str, str]:
    return {"string": value}


def _v(value: str) -> dict[str, str]:
    return {"version": value}


def gpu_slice(node: str, gpus: int = 8) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's kubelet plugin publishes for ``node``: ``gpus`` H100s and one
    MIG device of GPU 0 (which must never count as a GPU)."""
    devices: list[dict[str, Any]] = []
    for minor in range(gpus):
        devices.append({"name": f"gpu-{minor}", "attributes": {
            "type": _s("gpu"), "uuid": _s(f"GPU-{node}-{minor}"), "productName": _s("NVIDIA H100 80GB HBM3"),
            "brand": _s("Nvidia"), "architecture": _s("Hopper"), "cudaComputeCapability": _v("9.0.0"),
            "driverVersion": _v("570.124.6"), "cudaDriverVersion": _v("12.8.0"),
            "pcieBusID": _s(f"0000:{minor + 0x18:02x}:00.0"), "addressingMode": _s("None"),
        }, "capacity": {"memory": {"value": "80Gi"}}})
    devices.append({"name": "gpu-0-mig-9-4-4", "attributes": {
        "type": _s("mig"), "uuid": _s(f"MIG-{node}-0"), "parentUUID": _s(f"GPU-{node}-0"),
        "profile": _s("3g.40gb"), "productName": _s("NVIDIA H100 80GB HBM3"), "brand": _s("Nvidia"),
        "architecture": _s("Hopper"), "cudaComputeCapability": _v("9.0.0"),
        "driverVersion": _v("570.124.6"), "cudaDriverVersion": _v("12.8.0"),
        "pcieBusID": _s("0000:18:00.0"), "addressingMode": _s("None"),
    }, "capacity": {"memory": {"value": "40Gi"}}})
    return _slice(node, GPU_DRIVER, devices)


def channel_slice(node: str) -> dict[str, Any]:
    """The ComputeDomain kubelet plugin's slice: the node's IMEX channel 0."""
    device = {"name": "channel-0", "attributes": {"type": _s("channel"), "id": {"int": 0}}}
    return _slice(node, CD_DRIVER, [device])


def _slice(node: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def device_class(name: str, selector: str, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": spec}


def claim_template(api: rest.Client, namespace: str, name: str, device_class_name: str, count: int) -> None:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "devices", "exactly": {"deviceClassName": device_class_name, "count": count}}]}}}}
    api.call("POST", f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", body)


def claim_job(api: rest.Client, namespace: str, name: str, pods: int, templates: list[str],
              scheduler: str = "fabricsched", node: str | None = None) -> None:
    """An Indexed Job whose pods claim devices through ``templates`` and request no GPU resource."""
    claims = [{"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "restartPolicy": "Never", "resourceClaims": claims,
        "containers": [{"name": "train", "image": "trainer:1",
                        "resources": {"claims": [{"name": c["name"]} for c in claims]}}],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
                     "template": {"spec": spec}}}
    api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)


def allocations(api: rest.Client, namespace: str | None = None) -> list[tuple[str, str, str]]:
    """(claim, node, device) of every device allocated to a claim (of ``namespace``, or all)."""
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims" if namespace else f"{RESOURCE}/resourceclaims"
    found = []
    for claim in api.call("GET", path)["items"]:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or [{}]
        fields = terms[0].get("matchFields") or [{}]
        node = (fields[0].get("values") or [""])[0]
        for result in (allocation.get("devices") or {}).get("results") or ():
            found.append((claim["metadata"]["name"], node, f"{result['pool']}/{result['device']}"))
    return found


def gpus_allocated_per_node(api: rest.Client) -> dict[str, list[str]]:
    per_node: dict[str, list[str]] = {}
    for _claim, node, device in allocations(api):
        if "/gpu-" in device and "-mig-" not in device:
            per_node.setdefault(node, []).append(device)
    return per_node


def compute_domain_crd(api: rest.Client) -> None:
    """The ComputeDomain CRD as NVIDIA's chart ships it (the parts fabricsched reads, same names)."""
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "required": ["channel", "numNodes"], "properties": {
            "numNodes": {"type": "integer"},
            "channel": {"type": "object", "required": ["resourceClaimTemplate"], "properties": {
                "allocationMode": {"type": "string", "enum": ["All", "Single"], "default": "Single"},
                "resourceClaimTemplate": {"type": "object", "required": ["name"],
                                          "properties": {"name": {"type": "string"}}}}}}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "computedomains.resource.nvidia.com"},
            "spec": {"group": "resource.nvidia.com", "scope": "Namespaced",
                     "names": {"kind": "ComputeDomain", "listKind": "ComputeDomainList",
                               "plural": "computedomains", "singular": "computedomain"},
                     "versions": [{"name": "v1beta1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}}}]}}
    api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)

    def established() -> bool:
        status, got = api.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                  "computedomains.resource.nvidia.com")
        conditions = (got.get("status") or {}).get("conditions") or [] if status == 200 else []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    wait_for("ComputeDomain CRD established", established, timeout=30)


def compute_domain(api: rest.Client, namespace: str, name: str, template: str) -> None:
    """A ComputeDomain, and the channel claim template its controller makes for it."""
    body = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": {"name": name},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": template}}}}
    api.call("POST", f"/apis/resource.nvidia.com/v1beta1/namespaces/{namespace}/computedomains", body)
    claim_template(api, namespace, template, CHANNEL_CLASS, 1)


def dra_topology(name: str, clique: bool = False) -> dict[str, Any]:
    manifest = samples.demo_topology(name)
    manifest["spec"]["links"] = []
    manifest["spec"]["health"] = {"recoverAfterSeconds": 0}
    manifest["spec"]["draGpus"] = {}
    if clique:
        manifest["spec"]["tiers"].insert(0, {"name": "nvlink", "nodeLabel": CLIQUE})
    return manifest


@contextlib.contextmanager
def dra_fabric(root: Path, plugin_leaf: str, shape: tuple[int, int, int] = (2, 2, 8),
               hosts_per_clique: int = 4) -> Iterator[harness.Fabric]:
    """The sample fabric of ``shape`` whose hosts publish their GPUs as NVIDIA's DRA driver does
    (no allocatable ``nvidia.com/gpu``), except those of ``plugin_leaf``, which keep the device
    plugin's allocatable; the DeviceClass ``gpu.nvidia.com`` backs ``nvidia.com/gpu`` (DRA
    extended resource); every host has an NVLink clique label (``hosts_per_clique`` per clique)
    and a channel slice; the scheduler lists no managedResources; fabricsched running."""
    with harness.plane_with_fabricsched(root, dra=True) as fabric:
        spines, leaves, hosts = shape
        manifests = samples.sample_fabric(spines=spines, leaves_per_spine=leaves, hosts_per_leaf=hosts,
                                          gpus=8)
        for i, node in enumerate(manifests):
            node["metadata"]["labels"][CLIQUE] = f"cluster-a.{i // hosts_per_clique}"
            if node["metadata"]["labels"][samples.TOPOGRAPH.leaf] != plugin_leaf:
                for part in ("capacity", "allocatable"):
                    node["status"][part].pop(harness.GPU)
        names = fabric.add_nodes(manifests)
        api = fabric.api
        api.call("POST", f"{RESOURCE}/deviceclasses", device_class(GPU_CLASS, _GPU_SELECTOR, harness.GPU))
        api.call("POST", f"{RESOURCE}/deviceclasses", device_class(CHANNEL_CLASS, _CHANNEL_SELECTOR))
        for node in names:
            if fabric.leaf_of[node] != plugin_leaf:
                api.call("POST", f"{RESOURCE}/resourceslices", gpu_slice(node))
            api.call("POST", f"{RESOURCE}/resourceslices", channel_slice(node))
        compute_domain_crd(api)
        fabric.add_topology(dra_topology(harness.TOPOLOGY, clique=True))
        fabric.operator.start()
        yield fabric
