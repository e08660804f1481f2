"""A simulation's inputs, read and checked against the fabric they describe.

Everything that could make a run meaningless fails here, before the first event, pointing at
the file and line: a job no domain could ever hold, an event about a node the fabric lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fabricsched.api import topology as api
from fabricsched.placement import request
from fabricsched.sim import errors, manifests, policies, records
from fabricsched.topology import building, conflicts, fabric, index, nodes, selectors


@dataclass(frozen=True)
class Scenario:
    spec: api.FabricTopologySpec
    nodes: tuple[nodes.NodeInfo, ...]
    """Every node the topology selects (with or without GPUs: the index decides)."""
    jobs: tuple[records.Job, ...]
    events: tuple[records.HealthEvent, ...]
    structure: fabric.Fabric
    """The fabric with no health applied: what "the empty, healthy fabric" means."""
    conflicts: tuple[conflicts.ConflictInfo, ...]
    """Nodes the fabric leaves out (missing tier label, domain under two parents)."""

    def new_index(self) -> index.FabricIndex:
        """A fresh incremental fabric over the scenario's nodes, for one run to apply health to."""
        built = index.FabricIndex(self.spec)
        for node in self.nodes:
            built.set_node(node)
        return built


def load(nodes_path: str | Path, topology_path: str | Path, jobs_path: str | Path,
         events_path: str | Path | None = None) -> Scenario:
    spec = manifests.read_topology(topology_path)
    node_entries = manifests.read_nodes(nodes_path)
    selector = selectors.Selector.compile(spec.node_selector)
    infos: list[nodes.NodeInfo] = []
    for entry in node_entries:
        try:
            info = nodes.NodeInfo.from_manifest(entry.manifest)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise errors.SimInputError(nodes_path, entry.line, f"malformed Node: {e}") from e
        if selector.matches(info.labels):
            infos.append(info)
    built = building.build_fabric(spec, infos, {})
    structure = built.fabric
    if not structure.hosts:
        raise errors.SimInputError(
            nodes_path, 0, f"no node is selected by the topology ({selector}) with "
            f"{spec.gpu_resource} allocatable and every tier label; conflicts: "
            + ("; ".join(c.message for c in built.conflicts) if built.conflicts else "none"))
    jobs = records.read_jobs(jobs_path)
    check_jobs(jobs_path, jobs, structure)
    events = records.read_events(events_path) if events_path is not None else []
    if events_path is not None:
        check_events(events_path, events, structure)
    return Scenario(spec, tuple(infos), tuple(jobs), tuple(events), structure, built.conflicts)


def check_jobs(path: str | Path, jobs: Sequence[records.Job], structure: fabric.Fabric) -> None:
    """Every job fits the empty cluster; each tier it names (required, preferred, its slices')
    is a tier of the fabric, and some domain of a required one can hold what it must."""
    tier_names = [str(t.name) for t in structure.tiers]
    cluster: dict[int, int] = {}
    best_domain: dict[tuple[int, int], int] = {}

    def largest(tier: int, g: int) -> int:
        if (tier, g) not in best_domain:
            best_domain[(tier, g)] = structure.largest_domain(tier, g)[1]
        return best_domain[(tier, g)]

    for job in jobs:
        g = job.gpus_per_pod
        if g not in cluster:
            cluster[g] = structure.empty_slots(g)
        if job.pods > cluster[g]:
            raise errors.SimInputError(
                path, job.line, f"job {job.name!r} needs {job.pods} pods of {g} GPUs; the whole cluster "
                f"holds at most {cluster[g]} such pods")
        named = (("required_tier", job.required_tier), (records.PREFERRED_COLUMN, job.preferred_tier),
                 (records.SLICE_COLUMN, job.slices.tier if job.slices else None))
        for column, name in named:
            if name is not None and name not in tier_names:
                raise errors.SimInputError(
                    path, job.line,
                    f"job {job.name!r}: unknown {column} {name!r}; tiers: {', '.join(tier_names)}")
        if job.required_tier is not None:
            tier = tier_names.index(job.required_tier)
            if job.pods > largest(tier, g):
                raise errors.SimInputError(
                    path, job.line,
                    f"job {job.name!r} requires one {job.required_tier} domain for {job.pods} pods of {g} "
                    f"GPUs; the largest {job.required_tier} holds {largest(tier, g)}")
        if job.slices is not None and job.slices.required:
            tier = tier_names.index(job.slices.tier)
            if job.slices.pods > largest(tier, g):
                raise errors.SimInputError(
                    path, job.line,
                    f"job {job.name!r}: a slice of {job.slices.pods} pods of {g} GPUs must fit one "
                    f"{job.slices.tier}; the largest holds {largest(tier, g)}")
        asked = policies.gang_request(structure, job)
        if isinstance(asked, request.NoFit):
            raise errors.SimInputError(path, job.line, f"job {job.name!r}: {asked.reason}")


def check_events(path: str | Path, events: Sequence[records.HealthEvent], structure: fabric.Fabric) -> None:
    """Every event names a host or a domain of this fabric."""
    tier_names = [str(t.name) for t in structure.tiers]
    for event in events:
        if event.kind == "node":
            if event.node not in structure.hosts:
                raise errors.SimInputError(
                    path, event.line, f"unknown node {event.node!r} (not a host of this fabric)")
            continue
        if event.tier not in tier_names:
            raise errors.SimInputError(
                path, event.line, f"unknown tier {event.tier!r}; tiers: {', '.join(tier_names)}")
        key = (tier_names.index(str(event.tier)), event.domain)
        if key not in structure.domains:
            raise errors.SimInputError(path, event.line, f"unknown domain {event.target!r}")
