"""KAI-Scheduler's topology filtering cases, run through our engine (issue 31).

Ported from kai-scheduler/KAI-Scheduler ``pkg/scheduler/plugins/topology/job_filtering_test.go``
(our own code: each case rebuilt from its fabric and job, then asked of ``placing.place``). KAI
counts room in pods per domain (``AllocatablePods``) or CPU millis per node; here a rack of N
allocatable pods is N hosts of 1 GPU and each task a pod of 1 GPU, so the same pods fit. What
is checked: fit or no fit agrees; a required level holds; the plan uses no more domains per
level than KAI's expected domain. Where KAI's answer differs by design it is said at the case
and in docs/placement.md ("Peers' topology tests").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from placement_builders import FabricBuilder, all_free

from fabricsched import ids
from fabricsched.placement import placing, request, snapshot
from fabricsched.topology import fabric

LEVELS = [("rack", 1.0), ("zone", 1.0), ("region", 1.0)]
"""KAI's test trees are datacenter/region > zone > rack; a region is our top tier."""


def racks(layout: Mapping[str, Mapping[str, Sequence[int]]]) -> fabric.Fabric:
    """``{zone: {rack: [free GPUs of each host]}}`` under one region; a host has as many GPUs."""
    builder = FabricBuilder(tiers=LEVELS).at("region", "region1")
    for zone, by_rack in layout.items():
        builder.at("zone", zone)
        for rack, hosts in by_rack.items():
            builder.at("rack", rack)
            for i, gpus in enumerate(hosts):
                builder.host(f"{rack}-n{i}", max(gpus, 1))
    return builder.build()


def free_of(fab: fabric.Fabric, layout: Mapping[str, Mapping[str, Sequence[int]]]) -> dict[ids.NodeName, int]:
    free = all_free(fab)
    for by_rack in layout.values():
        for rack, hosts in by_rack.items():
            for i, gpus in enumerate(hosts):
                free[ids.NodeName(f"{rack}-n{i}")] = gpus
    return free


def ask(fab: fabric.Fabric, pods: int, gpus: int = 1, required: str | None = None,
        preferred: str | None = None) -> request.GangRequest | request.NoFit:
    tier = required or preferred
    return request.gang_on(fab, ids.GangKey("kai/test-job"), pods, gpus, tier, required is not None,
                           preferred=preferred if required else None)


def place(layout: Mapping[str, Mapping[str, Sequence[int]]], pods: int, gpus: int = 1,
          required: str | None = None, preferred: str | None = None) -> tuple[fabric.Fabric, object]:
    fab = racks(layout)
    gang = ask(fab, pods, gpus, required, preferred)
    if isinstance(gang, request.NoFit):
        return fab, gang
    return fab, placing.place(snapshot.build(fab), free_of(fab, layout), gang)


def used(fab: fabric.Fabric, plan: request.Plan, tier: str) -> set[str]:
    index = fab.tier_index(tier)
    return {fab.hosts[n].path[index] for n in plan.ranks}


# --- TestTopologyPlugin_subsetNodesFn -----------------------------------------------------------

@pytest.mark.parametrize(("required", "preferred"), [
    pytest.param("zone", "rack", id="successful topology allocation - right nodes"),
    pytest.param("rack", "rack", id="successful topology allocation - required equal preferred"),
])
def test_subset_nodes_two_tasks_go_to_the_node_that_holds_both(required: str, preferred: str) -> None:
    # node-1 (rack1) has room for both 500m tasks, node-2 (rack2) for none.
    _, plan = place({"zone1": {"rack1": [2], "rack2": [0]}}, 2, required=required, preferred=preferred)
    assert isinstance(plan, request.Plan) and set(plan.ranks) == {"rack1-n0"}


def test_subset_nodes_no_topology_constraint_early_return() -> None:
    _, plan = place({"zone1": {"rack1": [6]}}, 1)
    assert isinstance(plan, request.Plan)


@pytest.mark.parametrize("level", [
    pytest.param("nonexistent-level", id="getJobAllocatableDomains constrain definition error"),
    pytest.param("datacenter", id="topology not found - error (a level the tree lacks)"),
])
def test_a_required_level_the_tree_lacks_is_refused(level: str) -> None:
    fab = racks({"zone1": {"rack1": [6]}})
    refused = ask(fab, 1, required=level, preferred="rack")
    assert isinstance(refused, request.NoFit) and refused.unresolvable and repr(level) in refused.reason


def test_subset_nodes_insufficient_allocatable_pods_no_domains_found() -> None:
    # A task asking 2000m of a 1000m node: here a pod of 2 GPUs on a host of 1.
    _, plan = place({"zone1": {"rack1": [1]}}, 1, gpus=2, required="zone")
    assert isinstance(plan, request.NoFit) and plan.unresolvable


# --- TestTopologyPlugin_calculateRelevantDomainLevels -------------------------------------------

@pytest.mark.parametrize(("required", "preferred"), [
    pytest.param("zone", "rack", id="both required and preferred placement specified"),
    pytest.param("zone", None, id="only required placement specified"),
    pytest.param(None, "rack", id="only preferred placement specified"),
    pytest.param("rack", None, id="required placement at first level"),
    pytest.param(None, "zone", id="preferred placement at middle level"),
    pytest.param("region", "zone", id="complex topology with multiple levels"),
])
def test_relevant_levels_every_accepted_constraint_is_met(
    required: str | None, preferred: str | None,
) -> None:
    # KAI answers the levels it searches; ours always climbs from the lowest, so the check is that
    # the request is accepted and the plan keeps the required level (and the preferred when it can).
    fab, plan = place({"zone1": {"rack1": [1, 1], "rack2": [1, 1]}}, 2, required=required,
                      preferred=preferred)
    assert isinstance(plan, request.Plan)
    for level in filter(None, (required, preferred)):
        assert len(used(fab, plan, level)) == 1


@pytest.mark.parametrize(("required", "preferred"), [
    pytest.param("nonexistent", None, id="required placement not found in topology"),
    pytest.param("zone", "nonexistent", id="preferred placement not found in topology"),
])
def test_relevant_levels_unknown_levels_are_refused(required: str, preferred: str | None) -> None:
    refused = ask(racks({"zone1": {"rack1": [1]}}), 1, required=required, preferred=preferred)
    assert isinstance(refused, request.NoFit) and "'nonexistent' is not a tier" in refused.reason


# --- TestTopologyPlugin_getJobAllocatableDomains ------------------------------------------------

def test_allocatable_domains_return_multi_domain() -> None:
    # rack1 holds 2, rack2 1; KAI expects rack1 (then zone1): the plan is inside rack1.
    fab, plan = place({"zone1": {"rack1": [1, 1], "rack2": [1]}}, 2, required="zone", preferred="rack")
    assert isinstance(plan, request.Plan) and used(fab, plan, "rack") == {"rack1"}


def test_allocatable_domains_no_domains_can_allocate_the_job() -> None:
    _, plan = place({"zone1": {"rack1": [1]}}, 2, required="zone")
    assert isinstance(plan, request.NoFit) and plan.required_tier


def test_allocatable_domains_no_domains_using_idle_or_releasing_resources() -> None:
    # zone1 and zone2 each lack the room of one task (CPU 0.5 and 0.6 of 1, no GPU free).
    _, plan = place({"zone1": {"rack1": [0]}, "zone2": {"rack2": [0]}}, 2, required="zone")
    assert isinstance(plan, request.NoFit)


def test_allocatable_domains_complex_topology_with_multiple_levels() -> None:
    # KAI expects zone1.region1 (then region1); one rack of 3 holds the 3 pods, inside zone1.
    fab, plan = place({"zone1": {"rack1": [1, 1, 1], "rack2": [1, 1, 1]}, "zone9": {"rack9": [1, 1, 1]}},
                      3, required="region", preferred="zone")
    assert isinstance(plan, request.Plan)
    assert len(used(fab, plan, "zone")) == 1 and len(used(fab, plan, "rack")) == 1


def test_allocatable_domains_return_multiple_levels_of_domains() -> None:
    # 4 pods: zone1 (racks of 3 and 3) needs 2 racks, zone2 (2, 1, 1, 1, 1) 3; KAI expects zone1.
    fab, plan = place({"zone1": {"rack1": [1, 1, 1], "rack2": [1, 1, 1]},
                       "zone2": {"z2rack1": [1, 1], "z2rack2": [1], "z2rack3": [1], "z2rack4": [1],
                                 "z2rack5": [1]}}, 4, required="region", preferred="rack")
    assert isinstance(plan, request.Plan)
    assert used(fab, plan, "zone") == {"zone1"} and len(used(fab, plan, "rack")) == 2
    assert "preferred tier rack: no single rack holds it now" in plan.reasons
