"""The nodes a pod may use by its node selector and required node affinity (a held gang's floor)."""

from __future__ import annotations

from typing import Any

import pytest

from fabricsched import ids
from fabricsched.extender.decide import eligibility
from fabricsched.topology import nodes

LABELS = {
    "a": {"zone": "east", "pool": "h100", "rack": "3"},
    "b": {"zone": "east", "pool": "a100", "rack": "7"},
    "c": {"zone": "west", "pool": "h100"},
}
INFOS = {ids.NodeName(n): nodes.NodeInfo(ids.NodeName(n), labels) for n, labels in LABELS.items()}
HOSTS = [ids.NodeName(n) for n in (*LABELS, "unknown")]


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


def eligible(spec: dict[str, Any]) -> set[str] | None:
    constraints = eligibility.of({"spec": spec})
    assert constraints is not None
    found = constraints.eligible(HOSTS, INFOS)
    return None if found is None else set(found)


def test_a_pod_without_constraints_may_use_every_host() -> None:
    assert eligible({}) is None
    assert eligibility.of({}) == eligibility.NONE


@pytest.mark.parametrize(
    ("spec", "hosts"),
    [
        ({"nodeSelector": {"zone": "east"}}, {"a", "b"}),
        ({"nodeSelector": {"zone": "east", "pool": "h100"}}, {"a"}),
        ({"affinity": required({"matchExpressions": [expr("pool", "In", "h100")]})}, {"a", "c"}),
        ({"affinity": required({"matchExpressions": [expr("pool", "NotIn", "h100")]})}, {"b", "unknown"}),
        ({"affinity": required({"matchExpressions": [expr("rack", "Exists")]})}, {"a", "b"}),
        ({"affinity": required({"matchExpressions": [expr("rack", "DoesNotExist")]})}, {"c", "unknown"}),
        ({"affinity": required({"matchExpressions": [expr("rack", "Gt", "5")]})}, {"b"}),
        ({"affinity": required({"matchExpressions": [expr("rack", "Lt", "5")]})}, {"a"}),
        # Terms are ORed, the expressions of one term ANDed, and the selector applies as well.
        ({"affinity": required({"matchExpressions": [expr("zone", "In", "west")]},
                               {"matchFields": [expr("metadata.name", "In", "b")]})}, {"b", "c"}),
        ({"nodeSelector": {"zone": "east"},
          "affinity": required({"matchExpressions": [expr("pool", "In", "h100")]})}, {"a"}),
        # An empty term matches no node (as in Kubernetes).
        ({"affinity": required({})}, set()),
        # Preferred affinity is not a constraint.
        ({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}, None),
    ],
)
def test_selectors_and_required_affinity_pick_the_hosts(spec: dict[str, Any], hosts: set[str] | None) -> None:
    assert eligible(spec) == hosts


@pytest.mark.parametrize(
    "spec",
    [
        {"nodeSelector": ["zone=east"]},
        {"nodeSelector": {"zone": 1}},
        {"nodeSelector": {f"k{i}": "v" for i in range(65)}},
        {"affinity": required({"matchExpressions": [expr("zone", "Near", "east")]})},
        {"affinity": required({"matchExpressions": [expr("zone", "In")]})},
        {"affinity": required({"matchExpressions": [expr("zone", "Exists", "east")]})},
        {"affinity": required({"matchExpressions": [expr("rack", "Gt", "1", "2")]})},
        {"affinity": required({"matchFields": [expr("metadata.labels", "In", "a")]})},
        {"affinity": required({"matchFields": [expr("metadata.name", "Exists")]})},
        {"affinity": required({"matchExpressions": [expr("k" * 400, "Exists")]})},
        {"affinity": required(*[{} for _ in range(65)])},
        {"affinity": "any"},
    ],
    ids=["list", "number", "too many", "operator", "In without values", "Exists with values",
         "Gt with two", "field not name", "field operator", "long key", "too many terms", "not a map"],
)
def test_constraints_that_cannot_be_read_are_unreadable(spec: dict[str, Any]) -> None:
    assert eligibility.of({"spec": spec}) is eligibility.UNREADABLE


@pytest.mark.parametrize(
    ("rack", "matches"),
    [
        ("7", True), ("+7", True), ("9223372036854775807", True),
        # What Go's strconv.ParseInt(_, 10, 64) refuses, and the kube-scheduler with it, though
        # Python's int() would read it: non-ASCII digits, underscores, spaces, out of int64.
        ("\u0667", False), ("\uff17", False), ("1_0", False), (" 7", False), ("7\n", False),
        ("9223372036854775808", False), ("", False), ("0x10", False),
        # Hostile sizes: read in bounded time (each case well under 5 ms).
        ("9" * 100_000, False), ("1e1000000", False), ("\u0661" * 100_000, False),
    ],
)
def test_gt_reads_node_labels_as_the_kube_scheduler_does(rack: str, matches: bool) -> None:
    node = ids.NodeName("n")
    spec = {"affinity": required({"matchExpressions": [expr("rack", "Gt", "5")]})}
    constraints = eligibility.of({"spec": spec})
    assert constraints is not None
    found = constraints.eligible([node], {node: nodes.NodeInfo(node, {"rack": rack})})
    assert found == ({node} if matches else set())


@pytest.mark.parametrize("bound", ["\u0665", "5_0", " 5", "99999999999999999999"])
def test_a_bound_the_kube_scheduler_cannot_read_matches_no_node(bound: str) -> None:
    # Unreadable bound: the pod's constraint is read, and no node passes it.
    assert eligible({"affinity": required({"matchExpressions": [expr("rack", "Lt", bound)]})}) == set()
