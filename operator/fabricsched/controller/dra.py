"""The DRA kinds the state follows through ``listwatch``: ResourceSlices and DeviceTaintRules
(``resource.k8s.io/v1``, Kubernetes 1.37) into the state's ``topology.dra.DeviceIndex``, then the
``dra`` health source and the GPU devices of ``spec.draGpus`` fabrics; ResourceClaims,
ResourceClaimTemplates, DeviceClasses and NVIDIA's ComputeDomains (``resource.nvidia.com/v1beta1``)
into the state's claim index, for the GPUs pods claim and the GPUs allocated claims take
(docs/dra.md).

Each kind is ``optional``: a cluster may not serve it (before 1.37 DeviceTaintRule is not in
``v1``; a cluster without DRA has none of them, one without NVIDIA's driver no ComputeDomains),
and readiness must not wait for an API that is not there. An apply only moves an index and
notes what moved; ``settle`` (after each listing page, after each watch event) re-places the
nodes whose devices moved and re-counts the claims once: an initial listing of 25,000 claims
costs 50 re-counts of 500, not 25,000 of one. A slice re-feeds only the nodes whose devices it
carries; a rule may match any device, so it re-feeds every node. Nothing is written to either
object (read-only RBAC).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fabricsched import ids, listwatch, parsing
from fabricsched.controller import state
from fabricsched.topology import claims, dra

GROUP = "resource.k8s.io"
VERSION = "v1"
_PATH = f"/apis/{GROUP}/{VERSION}"
COMPUTE_DOMAINS_PATH = "/apis/resource.nvidia.com/v1beta1/computedomains"


class DraFollower:
    """Applies the DRA kinds to ``cluster`` and settles what they moved, once per page or event."""

    def __init__(self, cluster: state.ClusterState) -> None:
        self.cluster = cluster
        self.devices = cluster.devices
        self.held = cluster.dra.claims
        self._nodes: set[ids.NodeName] = set()
        """Nodes whose devices moved since the last settle."""
        self._rules = False
        """A DeviceTaintRule moved since the last settle (it may match any device)."""
        self._taken: set[ids.NodeName] = set()
        """Nodes whose devices taken by allocated claims moved since the last settle."""
        self._claims = False
        """The claim index moved since the last settle: pods with claims may count anew."""

    # --- devices ------------------------------------------------------------------------

    def apply_slice(self, body: Mapping[str, Any]) -> None:
        name, devices = dra.parse_slice(body)
        self._nodes |= self.devices.set_slice(name, devices)

    def delete_slice(self, key: listwatch.Key) -> None:
        self._nodes |= self.devices.remove_slice(key[1])

    def apply_rule(self, body: Mapping[str, Any]) -> None:
        self._rules |= self.devices.set_rule(dra.parse_rule(body))

    def delete_rule(self, key: listwatch.Key) -> None:
        self._rules |= self.devices.remove_rule(key[1])

    def settle_devices(self) -> None:
        nodes, self._nodes = self._nodes, set()
        if nodes:
            self.cluster.refeed_devices(nodes)
        if self._rules:
            self._rules = False
            self.cluster.refeed_devices(None)

    # --- claims -------------------------------------------------------------------------

    def apply_claim(self, body: Mapping[str, Any]) -> None:
        key = _key(body)
        spec = parsing.mapping(body.get("spec"), "spec")
        status = parsing.mapping(body.get("status"), "status")
        requests = claims.parse_requests(spec, "spec")
        self._taken |= self.held.set_claim(key, requests, claims.parse_allocation(status))
        self._claims = True

    def delete_claim(self, key: listwatch.Key) -> None:
        self._taken |= self.held.remove_claim(key)
        self._claims = True

    def apply_template(self, body: Mapping[str, Any]) -> None:
        spec = parsing.mapping(parsing.mapping(body.get("spec"), "spec").get("spec"), "spec.spec")
        self.held.set_template(_key(body), claims.parse_requests(spec, "spec.spec"))
        self._claims = True

    def delete_template(self, key: listwatch.Key) -> None:
        self.held.set_template(key, None)
        self._claims = True

    def apply_class(self, body: Mapping[str, Any]) -> None:
        self.held.set_class(listwatch.key_of(body)[1], claims.extended_resource_of(body))
        self._claims = True

    def delete_class(self, key: listwatch.Key) -> None:
        self.held.set_class(key[1], None)
        self._claims = True

    def apply_domain(self, body: Mapping[str, Any]) -> None:
        self.held.set_channel(_key(body), claims.channel_template_of(body))
        self._claims = True

    def delete_domain(self, key: listwatch.Key) -> None:
        self.held.set_channel(key, None)
        self._claims = True

    def settle_claims(self) -> None:
        if not self._claims:
            return
        taken, self._taken, self._claims = self._taken, set(), False
        self.cluster.refresh_claims(taken)

    # --- what is held -------------------------------------------------------------------

    def domains(self) -> list[listwatch.Key]:
        return [(namespace, domain) for (namespace, _), domain in self.held.channels.items()]


def kinds(cluster: state.ClusterState) -> list[listwatch.Kind]:
    """The DRA kinds, each optional (a 404 does not hold readiness back)."""
    f = DraFollower(cluster)
    held = f.held
    table: list[tuple[str, str, Callable[[Mapping[str, Any]], None], Callable[[listwatch.Key], None],
                      Callable[[], Iterable[listwatch.Key]], Callable[[], None]]] = [
        ("resourceslice", f"{_PATH}/resourceslices", f.apply_slice, f.delete_slice,
         lambda: [("", n) for n in f.devices.slice_names()], f.settle_devices),
        ("devicetaintrule", f"{_PATH}/devicetaintrules", f.apply_rule, f.delete_rule,
         lambda: [("", n) for n in f.devices.rule_names()], f.settle_devices),
        ("resourceclaim", f"{_PATH}/resourceclaims", f.apply_claim, f.delete_claim,
         lambda: list(held.claims), f.settle_claims),
        ("resourceclaimtemplate", f"{_PATH}/resourceclaimtemplates", f.apply_template,
         f.delete_template, lambda: list(held.templates), f.settle_claims),
        ("deviceclass", f"{_PATH}/deviceclasses", f.apply_class, f.delete_class,
         lambda: [("", n) for n in held.classes], f.settle_claims),
        ("computedomain", COMPUTE_DOMAINS_PATH, f.apply_domain, f.delete_domain, f.domains,
         f.settle_claims),
    ]
    return [listwatch.Kind(name, path, apply, delete, known, settle, optional=True,
                           rejects=(parsing.Invalid,))
            for name, path, apply, delete, known, settle in table]


def _key(body: Mapping[str, Any]) -> claims.ObjectKey:
    metadata = parsing.mapping(body.get("metadata"), "metadata")
    return (claims.checked_name(metadata.get("namespace"), "metadata.namespace"),
            claims.checked_name(metadata.get("name"), "metadata.name"))
