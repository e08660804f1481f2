"""A gang's constraints (issue 31): tiers, slices, slice-per-job, the native topology key, and
their precedence (docs/workloads.md "Placement constraints")."""

from __future__ import annotations

import pytest
from gang_lookups import Owners

from builders import make_pod
from fabricsched import gangs, parsing
from fabricsched.gangs import constraints, owners
from fabricsched.placement import request
from fabricsched.topology import nodes

LEAF_KEY = "fabric.topograph.run/tier-0"
JOBSET = gangs.JobSetFacts("llm", "uid-js", (
    gangs.ReplicatedJob("init", replicas=1, pods_per_job=1, gpus_per_pod=0),
    gangs.ReplicatedJob("node", replicas=4, pods_per_job=4, gpus_per_pod=8),
))


def group_pod(annotations: dict[str, str] | None = None) -> nodes.PodUsage:
    builder = make_pod("p-0", "train").gpus(8)
    for key, value in (annotations or {}).items():
        builder.annotate(key, value)
    manifest = builder.build()
    manifest["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
    return nodes.PodUsage.from_manifest(manifest)


def identify(pod: nodes.PodUsage, lookup: Owners) -> gangs.GangIdentity:
    found = gangs.identify(pod, lookup)
    assert isinstance(found, gangs.GangIdentity), found
    return found


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({}, constraints.Constraints(), id="nothing asked: the lowest tier that fits"),
    pytest.param({"fabricsched.io/required-tier": "spine", "fabricsched.io/preferred-tier": "leaf"},
                 constraints.Constraints("spine", True, "leaf"), id="a required spine and a preferred leaf"),
    pytest.param({"fabricsched.io/preferred-tier": "leaf"}, constraints.Constraints("leaf", False),
                 id="a preferred tier alone"),
    pytest.param({"fabricsched.io/slice-size": "4", "fabricsched.io/slice-required-tier": "leaf"},
                 constraints.Constraints(slices=request.Slices(4, "leaf", True)), id="required slices"),
    pytest.param({"fabricsched.io/slice-size": "8", "fabricsched.io/slice-preferred-tier": "nvlink"},
                 constraints.Constraints(slices=request.Slices(8, "nvlink", False)), id="preferred slices"),
])
def test_annotations_read_as_constraints(
    annotations: dict[str, str], expected: constraints.Constraints,
) -> None:
    assert constraints.of_pod(annotations) == expected


@pytest.mark.parametrize("annotations", [
    pytest.param({"fabricsched.io/slice-size": "4"}, id="a slice size without a tier"),
    pytest.param({"fabricsched.io/slice-required-tier": "leaf"}, id="a slice tier without a size"),
    pytest.param({"fabricsched.io/slice-size": "0", "fabricsched.io/slice-required-tier": "leaf"},
                 id="a slice of no pods"),
    pytest.param({"fabricsched.io/slice-size": "-4", "fabricsched.io/slice-required-tier": "leaf"},
                 id="a signed size"),
    pytest.param({"fabricsched.io/slice-size": "4", "fabricsched.io/slice-required-tier": "x" * 64},
                 id="a tier name too long"),
    pytest.param({"fabricsched.io/slice-per-job": "yes", "fabricsched.io/slice-required-tier": "leaf"},
                 id="slice-per-job not true or false"),
    pytest.param({"fabricsched.io/slice-per-job": "true", "fabricsched.io/slice-required-tier": "leaf"},
                 id="slice-per-job on a pod that is no JobSet's"),
])
def test_bad_slice_annotations_are_refused_with_the_annotation_named(annotations: dict[str, str]) -> None:
    with pytest.raises(parsing.Invalid, match=r"fabricsched\.io/slice"):
        constraints.of_pod(annotations)


def test_slice_per_job_is_one_child_jobs_pods() -> None:
    asked = constraints.of_pod({"fabricsched.io/slice-per-job": "true",
                                "fabricsched.io/slice-required-tier": "leaf"}, jobset=JOBSET)
    assert asked.slices == request.Slices(4, "leaf", True)
    uneven = gangs.JobSetFacts("llm", "u", (gangs.ReplicatedJob("a", 1, 4, 8),
                                            gangs.ReplicatedJob("b", 1, 2, 8)))
    with pytest.raises(parsing.Invalid, match="differ in size"):
        constraints.of_pod({"fabricsched.io/slice-per-job": "true",
                            "fabricsched.io/slice-required-tier": "leaf"}, jobset=uneven)


def test_a_podgroup_topology_key_is_the_gangs_native_constraint() -> None:
    group = gangs.PodGroupFacts("pg", "uid-pg", 4, topology_key=LEAF_KEY)
    gang = identify(group_pod(), Owners(pod_groups={"pg": group}))
    assert (gang.size, gang.tier, gang.topology_key) == (4, None, LEAF_KEY)


def test_an_annotation_on_the_pods_wins_over_the_native_key() -> None:
    group = gangs.PodGroupFacts("pg", "uid-pg", 4, topology_key=LEAF_KEY)
    gang = identify(group_pod({"fabricsched.io/required-tier": "spine"}), Owners(pod_groups={"pg": group}))
    assert (gang.tier, gang.required, gang.topology_key) == ("spine", True, None)


def test_the_podgroups_key_wins_over_its_workload_templates() -> None:
    group = gangs.PodGroupFacts("pg", "uid-pg", 4, topology_key="rack", template_topology_key="block")
    assert constraints.of_pod({}, group).topology_key == "rack"
    templated = gangs.PodGroupFacts("pg", "uid-pg", 4, template_topology_key="block")
    assert constraints.of_pod({}, templated).topology_key == "block"


def test_a_basic_policy_podgroups_key_is_not_read() -> None:
    basic = gangs.PodGroupFacts("pg", "uid-pg", None, topology_key=LEAF_KEY)
    gang = identify(group_pod(), Owners(pod_groups={"pg": basic}))
    assert gang.size == 1 and gang.topology_key is None


def podgroup(spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "pg", "uid": "u"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, **spec}}


def test_podgroup_and_workload_manifests_give_their_keys_and_template() -> None:
    facts = owners.pod_group_facts(podgroup({
        "schedulingConstraints": {"topology": [{"key": LEAF_KEY}]},
        "workloadRef": {"workloadName": "w", "templateName": "workers"}}))
    assert (facts.topology_key, facts.workload) == (LEAF_KEY, ("w", "workers"))
    workload = owners.workload_facts({"metadata": {"name": "w", "uid": "wu"}, "spec": {"podGroupTemplates": [
        {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}},
         "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]}},
        {"name": "plain", "schedulingPolicy": {"basic": {}}}]}})
    assert workload.template_keys == {"workers": "example.com/rack"}


@pytest.mark.parametrize("key", ["", "a b", "/x", "x" * 400, 7])
def test_a_topology_key_that_is_no_label_key_makes_the_podgroup_unreadable(key: object) -> None:
    with pytest.raises(parsing.Invalid):
        owners.pod_group_facts(podgroup({"schedulingConstraints": {"topology": [{"key": key}]}}))


@pytest.mark.parametrize(("value", "expected"), [
    ("ring", request.Pattern.RING), ("all-to-all", request.Pattern.ALL_TO_ALL), ("", None)])
def test_the_traffic_annotation_names_the_pattern(value: str, expected: request.Pattern | None) -> None:
    assert constraints.of_pod({"fabricsched.io/traffic": value}).traffic == expected
    assert constraints.of_pod({}).traffic is None


@pytest.mark.parametrize("value", ["Ring", "tree", "all_to_all", "ring ", "x" * 100_000])
def test_an_unknown_traffic_pattern_is_refused_with_the_annotation_named(value: str) -> None:
    refused = r"annotation fabricsched\.io/traffic=.* is not all-to-all or ring"
    with pytest.raises(parsing.Invalid, match=refused) as e:
        constraints.of_pod({"fabricsched.io/traffic": value})
    assert len(str(e.value)) < 200  # a huge value is cut, not echoed


def test_a_pod_with_an_unknown_traffic_pattern_is_not_planned_and_says_why() -> None:
    pod = nodes.PodUsage.from_manifest(make_pod("p-0", "train").gpus(8).annotate(
        "fabricsched.io/traffic", "mesh").build())
    found = gangs.identify(pod, Owners())
    assert not isinstance(found, gangs.GangIdentity) and "fabricsched.io/traffic" in found.reason
    ring = nodes.PodUsage.from_manifest(make_pod("p-0", "train").gpus(8).annotate(
        "fabricsched.io/traffic", "ring").build())
    assert identify(ring, Owners()).traffic == request.Pattern.RING
