"""FabricTopology spec.draGpus: GPUs published through Dynamic Resource Allocation (ResourceSlices)
rather than as a node's allocatable extended resource (docs/dra.md).

Part of the FabricTopology CRD (``fabricsched.api.topology`` re-exports it); the CRD's schema is
generated from this model (``fabricsched.api.crd``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from fabricsched.api import openapi
from fabricsched.api.base import WireModel

NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
"""NVIDIA's DRA driver for GPUs (github.com/NVIDIA/k8s-dra-driver-gpu): one device per whole GPU
(string attribute ``type: gpu``) beside its MIG (``type: mig``) and vfio (``type: vfio``) devices
(``cmd/gpu-kubelet-plugin/deviceinfo.go``, ``GetDevice``)."""

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_ATTRIBUTE = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_Class = Annotated[str, Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN)]
_Attribute = Annotated[str, Field(min_length=1, max_length=128, pattern=_ATTRIBUTE)]
_Value = Annotated[str, Field(max_length=64)]


class AttributeMatch(WireModel):
    """One string attribute a GPU device carries."""

    name: _Attribute = Field(description="Attribute name; without a domain, the driver's own.")
    value: _Value = Field(description="Its string value.")


class DraGpuSpec(WireModel):
    """Which DRA devices are this fabric's GPUs, and which claims ask for them."""

    driver: str = Field(
        default=NVIDIA_GPU_DRIVER, min_length=1, max_length=63, pattern=_DNS_SUBDOMAIN,
        description="DRA driver publishing the GPUs (ResourceSlice spec.driver).",
    )
    attributes: list[AttributeMatch] = Field(
        default_factory=lambda: [AttributeMatch(name="type", value="gpu")],
        max_length=8,
        description="String attributes a device of the driver must carry, all of them, to count as "
        "one GPU (NVIDIA's driver: type=gpu for a whole GPU; its MIG and vfio devices never count). "
        "A name without a domain is the driver's own attribute.",
        json_schema_extra=openapi.extensions(list_type="atomic"),
    )
    device_classes: list[_Class] = Field(
        default_factory=lambda: [NVIDIA_GPU_DRIVER],
        min_length=1,
        max_length=16,
        description="DeviceClasses whose requests count as GPUs of this fabric: a claim's "
        "devices.requests[].exactly naming one counts its count (allocationMode All and "
        "firstAvailable cannot be counted, docs/dra.md), and so does the implicit extended resource "
        "deviceclass.resource.kubernetes.io/<class>.",
        json_schema_extra=openapi.extensions(list_type="set"),
    )
