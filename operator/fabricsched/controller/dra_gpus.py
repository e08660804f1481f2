"""GPUs through DRA in the cluster state: counting pods' claimed GPUs against every fabric that
reads GPUs from ResourceSlices (``spec.draGpus``), and keeping those counts current as templates,
claims, DeviceClasses and ComputeDomains change (docs/dra.md).

``ClusterState`` owns one ``DraGpus``; the list-and-watch of ``controller.dra`` feeds its
``claims`` index. Pure bookkeeping over ``topology.claims``: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fabricsched import gangs
from fabricsched.api import topology as api
from fabricsched.controller import fabrics
from fabricsched.topology import claims, dra
from fabricsched.topology import nodes as k8s

PodKey = tuple[str, str]
"""(namespace, name) of a pod."""

CONSTRAINTS = (gangs.REQUIRED_TIER_ANNOTATION, gangs.PREFERRED_TIER_ANNOTATION)
"""The tier-constraint annotations: a ComputeDomain gang that sets neither is held to one NVLink
domain through the first."""


class DraGpus:
    """The claim index and the pods counted with it."""

    def __init__(self, devices: dra.DeviceIndex) -> None:
        self.devices = devices
        self.claims = claims.ClaimIndex()
        self._counted_at = self.claims.version
        self._naming: dict[claims.ObjectKey, set[PodKey]] = {}
        """Claim -> the pods naming it in ``spec.resourceClaims`` (by name, not by template)."""
        self._fabrics: tuple[list[api.FabricTopologySpec], list[claims.DraFabric]] = ([], [])
        """The topology specs ``fabrics_of`` last saw, and what it made of them."""

    def fabrics_of(self, topologies: Iterable[fabrics.TopologyFabric]) -> list[claims.DraFabric]:
        """The fabrics reading GPUs through DRA, with their NVLink (clique) tier if they have one;
        made again only when a topology's spec is another object (every pod applied asks)."""
        specs = [tf.spec for tf in topologies]
        made, fabrics_made = self._fabrics
        if len(made) != len(specs) or any(a is not b for a, b in zip(made, specs, strict=True)):
            fabrics_made = [
                claims.DraFabric(spec.gpu_resource, spec.dra_gpus, next(
                    (t.name for t in spec.tiers if t.node_label == api.NVLINK_CLIQUE_LABEL), None))
                for spec in specs if spec.dra_gpus is not None
            ]
            self._fabrics = (specs, fabrics_made)
        return fabrics_made

    def count(self, pod: k8s.PodUsage, topologies: Iterable[fabrics.TopologyFabric]) -> k8s.PodUsage:
        """``pod`` with its claimed GPUs counted (unchanged when it has no claims)."""
        return self._count(pod, self.fabrics_of(topologies))

    def _count(self, pod: k8s.PodUsage, dra_fabrics: list[claims.DraFabric]) -> k8s.PodUsage:
        if not pod.claims and not any(k.startswith(claims.IMPLICIT_PREFIX) for k in pod.requests):
            return pod
        for named in pod.claims:
            if named.claim:
                self._naming.setdefault((pod.namespace, named.claim), set()).add((pod.namespace, pod.name))
        # ``fold`` sets ``claim_gpus`` and ``uncounted`` anew (it reads them only to return the
        # pod itself when they stay): no copy first.
        return claims.fold(pod, dra_fabrics, self.claims, CONSTRAINTS)

    def recount(self, pods: Mapping[PodKey, k8s.PodUsage],
                topologies: Iterable[fabrics.TopologyFabric],
                by_namespace: Mapping[str, Mapping[PodKey, k8s.PodUsage]]) -> dict[PodKey, k8s.PodUsage]:
        """Pods whose count changed since the claim index last moved (a class or a topology:
        every pod with claims; a template or channel: the pods of its namespace; a claim's
        spec: the pods naming it); empty when nothing moved. Claims come one event each,
        thousands at a start: re-counting every pod for each would be quadratic."""
        changed, self.claims.changed_claims = self.claims.changed_claims, set()
        spaces, self.claims.changed_namespaces = self.claims.changed_namespaces, set()
        keys: Iterable[PodKey]
        if self._counted_at != self.claims.version:
            self._counted_at = self.claims.version
            keys = pods
        else:
            keys = {p for claim in changed for p in self._naming.get(claim, ())}
            keys.update(p for space in spaces for p in by_namespace.get(space, ()))
            for claim in changed:
                if claim not in self.claims.claims:
                    self._naming.pop(claim, None)  # gone: its pods re-count once, below
        listed = self.fabrics_of(topologies)
        moved = {}
        for key in keys:
            pod = pods.get(key)
            if pod is not None and pod.claims:
                again = self._count(pod, listed)
                if again is not pod and again != pod:
                    moved[key] = again
        return moved

    def topology_changed(self) -> None:
        """A topology's spec changed: counts are made again at the next ``recount``."""
        self.claims.version += 1
