"""kopf handlers for DRA: ResourceSlices and DeviceTaintRules (``resource.k8s.io/v1``, Kubernetes
1.37) into the state's ``topology.dra.DeviceIndex``, then the ``dra`` health source and the GPU
devices of ``spec.draGpus`` fabrics; ResourceClaims, ResourceClaimTemplates, DeviceClasses and
NVIDIA's ComputeDomains (``resource.nvidia.com/v1beta1``) into the state's claim index, for the
GPUs pods claim and the GPUs allocated claims take (docs/dra.md).

Event handlers, not index handlers: the operator's readiness must not wait for an API a cluster
may not serve (before 1.37 DeviceTaintRule is not in ``v1``; a cluster without DRA has neither);
kopf then logs the resource as unresolved and watches the rest. A slice re-feeds only the nodes
whose devices it carries; a rule may match any device, so it re-feeds every node. Nothing is
written to either object (read-only RBAC).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from fabricsched import parsing
from fabricsched.controller import runtime
from fabricsched.topology import claims, dra

logger = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
VERSION = "v1"
RESOURCE_SLICES = (GROUP, VERSION, "resourceslices")
DEVICE_TAINT_RULES = (GROUP, VERSION, "devicetaintrules")
RESOURCE_CLAIMS = (GROUP, VERSION, "resourceclaims")
RESOURCE_CLAIM_TEMPLATES = (GROUP, VERSION, "resourceclaimtemplates")
DEVICE_CLASSES = (GROUP, VERSION, "deviceclasses")
COMPUTE_DOMAINS = ("resource.nvidia.com", "v1beta1", "computedomains")


def register(registry: kopf.OperatorRegistry, rt: runtime.Runtime) -> None:
    """Add the ResourceSlice and DeviceTaintRule handlers to ``registry``."""
    cluster = rt.state
    index = cluster.devices

    def on_slice(deleted: bool, body: Mapping[str, Any]) -> None:
        if deleted:
            touched = index.remove_slice(_name(body))
        else:
            name, devices = dra.parse_slice(body)
            touched = index.set_slice(name, devices)
        if touched:
            cluster.refeed_devices(touched)

    def on_rule(deleted: bool, body: Mapping[str, Any]) -> None:
        changed = index.remove_rule(_name(body)) if deleted else index.set_rule(dra.parse_rule(body))
        if changed:
            cluster.refeed_devices(None)

    held = cluster.dra.claims

    def on_claim(deleted: bool, body: Mapping[str, Any]) -> None:
        key = _key(body)
        if deleted:
            touched = held.remove_claim(key)
        else:
            spec = parsing.mapping(body.get("spec"), "spec")
            status = parsing.mapping(body.get("status"), "status")
            requests = claims.parse_requests(spec, "spec")
            touched = held.set_claim(key, requests, claims.parse_allocation(status))
        cluster.refresh_claims(touched)

    def on_template(deleted: bool, body: Mapping[str, Any]) -> None:
        spec = parsing.mapping(parsing.mapping(body.get("spec"), "spec").get("spec"), "spec.spec")
        held.set_template(_key(body), None if deleted else claims.parse_requests(spec, "spec.spec"))
        cluster.refresh_claims(())

    def on_class(deleted: bool, body: Mapping[str, Any]) -> None:
        held.set_class(_name(body), None if deleted else claims.extended_resource_of(body))
        cluster.refresh_claims(())

    def on_domain(deleted: bool, body: Mapping[str, Any]) -> None:
        held.set_channel(_key(body), None if deleted else claims.channel_template_of(body))
        cluster.refresh_claims(())

    for kind, resource, apply in (("resourceslice", RESOURCE_SLICES, on_slice),
                                  ("devicetaintrule", DEVICE_TAINT_RULES, on_rule),
                                  ("resourceclaim", RESOURCE_CLAIMS, on_claim),
                                  ("resourceclaimtemplate", RESOURCE_CLAIM_TEMPLATES, on_template),
                                  ("deviceclass", DEVICE_CLASSES, on_class),
                                  ("computedomain", COMPUTE_DOMAINS, on_domain)):
        kopf.on.event(*resource, id=f"dra-{kind}", registry=registry)(_handler(rt, kind, apply))


def _handler(rt: runtime.Runtime, kind: str,
             apply: Callable[[bool, Mapping[str, Any]], None]) -> Callable[..., Any]:
    async def event_fn(type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        try:
            apply(type == "DELETED", body)
        except parsing.Invalid as e:
            # A forged or future object: skipped, with what was wrong; the watch goes on.
            rt.metrics.handler_errors.labels(kind).inc()
            logger.warning("ignoring %s %s: %s", kind, parsing.excerpt(_name(body), 80), e)
            return
        except Exception:  # an object no parser foresaw must not stop the watch of all others
            rt.metrics.handler_errors.labels(kind).inc()
            logger.exception("cannot apply %s %s", kind, parsing.excerpt(_name(body), 80))
            return
        rt.metrics.watch_events.labels(kind, "deleted" if type == "DELETED" else "applied").inc()
    event_fn.__name__ = f"watch_{kind}"
    return event_fn


def _key(body: Mapping[str, Any]) -> claims.ObjectKey:
    metadata = parsing.mapping(body.get("metadata"), "metadata")
    return (claims.checked_name(metadata.get("namespace"), "metadata.namespace"),
            claims.checked_name(metadata.get("name"), "metadata.name"))


def _name(body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata") or {}
    return str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""
