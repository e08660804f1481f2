"""Builders of the simulator tests: small fabrics written as files, as a user would hand them in.

``SimFiles`` writes nodes/topology (from ``fabricsched.sim.fabrics``), jobs and events CSVs
into a temporary folder and loads them into a ``Scenario``; ``Scripted`` is a policy that
places each job where the test says, so the engine and the capacity model can be checked on
hand-computed numbers without depending on any placement rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from fabricsched import ids
from fabricsched.placement import capacity, patience
from fabricsched.sim import fabrics, records, scenario
from fabricsched.topology import fabric

JOB_HEADER = "name,submit_s,pods,gpus_per_pod,duration_s,required_tier"
EVENT_HEADER = "time_s,target_kind,target,state,capacity"


class SimFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes = root / "nodes.yaml"
        self.topology = root / "topology.yaml"
        self.jobs = root / "jobs.csv"
        self.events: Path | None = None

    def fabric(self, layout: str = "spine:1,leaf:2:2.0", hosts_per_leaf: int = 2, gpus: int = 8,
               bandwidth: float = 100.0, recover_after: int = 300) -> SimFiles:
        """``layout`` is top tier first, as in ``fabricsched trace fabric --layout``."""
        shape = fabrics.parse_layout(layout, hosts_per_leaf, gpus)
        shape = fabrics.FabricLayout(shape.tiers, hosts_per_leaf, gpus, bandwidth, recover_after)
        self.nodes.write_text(yaml.safe_dump(fabrics.node_list(shape)))
        self.topology.write_text(yaml.safe_dump(fabrics.topology(shape, "test"), sort_keys=False))
        return self

    def job_rows(self, *rows: str, header: str = JOB_HEADER) -> SimFiles:
        self.jobs.write_text("\n".join([header, *rows]) + "\n")
        return self

    def event_rows(self, *rows: str, header: str = EVENT_HEADER) -> SimFiles:
        self.events = self.root / "events.csv"
        self.events.write_text("\n".join([header, *rows]) + "\n")
        return self

    def load(self) -> scenario.Scenario:
        return scenario.load(self.nodes, self.topology, self.jobs, self.events)


class Scripted:
    """A policy that answers from a table: job name -> node names (missing: does not fit)."""

    name = "scripted"

    def __init__(self, table: Mapping[str, Sequence[str]]) -> None:
        self.table = table

    def place(
        self,
        snapshot: fabric.Fabric,
        free: Mapping[ids.NodeName, int],
        traffic: capacity.Traffic,
        job: records.Job,
        held: patience.Held,
    ) -> tuple[ids.NodeName, ...] | None:
        ranks = tuple(ids.NodeName(n) for n in self.table.get(job.name, ()))
        if not ranks or any(free[n] < job.gpus_per_pod * ranks.count(n) for n in set(ranks)):
            return None
        return ranks
