"""The DRA side of bench/scale_bench.py (``--gpus dra``): GPUs published as ResourceSlices and
claimed through ResourceClaims instead of the device plugin's ``nvidia.com/gpu``.

What the kwok nodes publish follows NVIDIA's DRA driver for GPUs
(github.com/NVIDIA/k8s-dra-driver-gpu, ``cmd/gpu-kubelet-plugin/deviceinfo.go``): one slice per
node of driver ``gpu.nvidia.com``, pool = the node, a device ``gpu-<minor>`` per whole GPU with
the string attribute ``type: gpu`` (and the driver's other attributes), beside one MIG device of
GPU 0 (``type: mig``, never a GPU); its DeviceClass ``gpu.nvidia.com`` selects the whole GPUs.
The nodes have no allocatable ``nvidia.com/gpu``.

Pods claim GPUs through a ResourceClaimTemplate ``gpus-<n>`` of their namespace (one request of
``n`` devices of that class). The fill pods, bound by ``nodeName`` with no scheduler involved,
each get a ResourceClaim of their own whose ``status.allocation`` names one GPU of their node
and whose ``reservedFor`` names the pod, as the kube-scheduler's DynamicResources plugin would
have written it at PreBind.
"""

from __future__ import annotations

from typing import Any

from fabricsched.cluster import rest

RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
CLASS = "gpu.nvidia.com"
GPUS_PER_NODE = 8
CLAIM = "gpus"
"""The pod's name for its GPU claim (``spec.resourceClaims[].name``)."""
_SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"


def _s(value: str) -> dict[str, str]:
    return {"string": value}


def _v(value: str) -> dict[str, str]:
    return {"version": value}


def _common() -> dict[str, dict[str, str]]:
    return {"productName": _s("NVIDIA H100 80GB HBM3"), "brand": _s("Nvidia"), "architecture": _s("Hopper"),
            "cudaComputeCapability": _v("9.0.0"), "driverVersion": _v("570.124.6"),
            "cudaDriverVersion": _v("12.8.0"), "addressingMode": _s("None")}


def gpu_slice(node: str) -> dict[str, Any]:
    """The slice NVIDIA's kubelet plugin publishes for ``node``: 8 GPUs and one MIG device."""
    devices: list[dict[str, Any]] = [
        {"name": f"gpu-{minor}",
         "attributes": {"type": _s("gpu"), "uuid": _s(f"GPU-{node}-{minor}"),
                        "pcieBusID": _s(f"0000:{minor + 0x18:02x}:00.0"), **_common()},
         "capacity": {"memory": {"value": "80Gi"}}}
        for minor in range(GPUS_PER_NODE)]
    devices.append({"name": "gpu-0-mig-9-4-4",
                    "attributes": {"type": _s("mig"), "uuid": _s(f"MIG-{node}-0"),
                                   "parentUUID": _s(f"GPU-{node}-0"), "profile": _s("3g.40gb"),
                                   "pcieBusID": _s("0000:18:00.0"), **_common()},
                    "capacity": {"memory": {"value": "40Gi"}}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def without_allocatable(node: dict[str, Any], resource: str) -> dict[str, Any]:
    """``node`` with no allocatable (or capacity) ``resource``: its GPUs come from its slice."""
    for part in ("capacity", "allocatable"):
        node["status"][part].pop(resource, None)
    return node


def device_class(api: rest.Client) -> None:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": _SELECTOR}}]}}
    api.call("POST", f"{RESOURCE}/deviceclasses", body)


def publish(api: rest.Client, node: str) -> None:
    api.call("POST", f"{RESOURCE}/resourceslices", gpu_slice(node))


def topology(manifest: dict[str, Any]) -> dict[str, Any]:
    """A FabricTopology whose GPUs are the driver's whole GPUs (``draGpus: {}``: every default)."""
    manifest["spec"]["draGpus"] = {}
    return manifest


def template_name(gpus: int) -> str:
    return f"gpus-{gpus}"


def templates(api: rest.Client, namespace: str) -> None:
    """A ResourceClaimTemplate ``gpus-<n>`` for 1 to 8 GPUs in ``namespace``."""
    for gpus in range(1, GPUS_PER_NODE + 1):
        request = {"name": CLAIM, "exactly": {"deviceClassName": CLASS, "count": gpus}}
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": template_name(gpus)},
                "spec": {"spec": {"devices": {"requests": [request]}}}}
        api.call("POST", f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", body)


def claiming(spec: dict[str, Any], gpus: int, claim_name: str | None = None) -> dict[str, Any]:
    """``spec`` (one container, no GPU resources) claiming ``gpus`` GPUs: through the template
    ``gpus-<n>``, or through the ResourceClaim ``claim_name``."""
    source = ({"resourceClaimName": claim_name} if claim_name
              else {"resourceClaimTemplateName": template_name(gpus)})
    spec["resourceClaims"] = [{"name": CLAIM, **source}]
    spec["containers"][0]["resources"] = {"claims": [{"name": CLAIM}]}
    return spec


def fill_claim(api: rest.Client, namespace: str, name: str) -> None:
    """The ResourceClaim of one fill pod: one GPU, allocated later (``allocate``)."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": CLAIM, "exactly": {"deviceClassName": CLASS}}]}}}
    api.call("POST", f"{RESOURCE}/namespaces/{namespace}/resourceclaims", body)


def allocate(api: rest.Client, namespace: str, pod: dict[str, Any], node: str, minor: int) -> None:
    """The claim of ``pod`` (same name) allocated GPU ``minor`` of ``node`` and reserved for the
    pod, as the scheduler writes it at PreBind."""
    meta = pod["metadata"]
    status = {"allocation": {
        "devices": {"results": [
            {"request": CLAIM, "driver": DRIVER, "pool": node, "device": f"gpu-{minor}"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]}
    api.call("PATCH", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{meta['name']}/status",
             {"status": status}, rest.MERGE_PATCH)
