"""Extender wire types: the scheduler's JSON parses, our answers carry its exact keys."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from fabricsched.api import extender

# Go field names of k8s.io/kube-scheduler/extender/v1 (no JSON tags upstream: the names are the keys).
UPSTREAM_KEYS: list[tuple[type[BaseModel], set[str]]] = [
    (extender.ExtenderArgs, {"Pod", "Nodes", "NodeNames"}),
    (extender.ExtenderFilterResult,
     {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}),
    (extender.HostPriority, {"Host", "Score"}),
]


@pytest.mark.parametrize(
    ("model", "keys"), UPSTREAM_KEYS, ids=[f"{m.__name__} uses the Go field names" for m, _ in UPSTREAM_KEYS]
)
def test_aliases_are_the_upstream_go_field_names(model: type[BaseModel], keys: set[str]) -> None:
    assert {f.alias for f in model.model_fields.values()} == keys


def test_a_node_cache_capable_filter_call_parses(filter_body: str) -> None:
    args = extender.ExtenderArgs.model_validate_json(filter_body)
    assert args.node_cache_capable and args.nodes is None
    assert args.candidate_names() == ["gpu-017", "gpu-018", "gpu-019", "gpu-031"]
    assert args.pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "b"
    assert args.pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def with_nodes(body: str, names: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(body)
    data["NodeNames"] = None
    data["Nodes"] = {"metadata": {"resourceVersion": "1"}, "items": [
        {"metadata": {"name": n, "labels": {"fabric.topograph.run/tier-0": "l03"}},
         "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for n in names
    ]}
    return data


def test_a_filter_call_with_whole_nodes_gets_whole_nodes_back(filter_body: str) -> None:
    args = extender.ExtenderArgs.model_validate(with_nodes(filter_body, ["gpu-017", "gpu-018"]))
    assert not args.node_cache_capable and args.candidate_names() == ["gpu-017", "gpu-018"]
    result = extender.ExtenderFilterResult.answering(args, ["gpu-018"], failed={"gpu-017": "reserved"})
    wire = json.loads(json.dumps(result.to_wire()))
    assert set(wire) == {"Nodes", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert [n["metadata"]["name"] for n in wire["Nodes"]["items"]] == ["gpu-018"]
    assert wire["Nodes"]["items"][0]["status"] == {"allocatable": {"nvidia.com/gpu": "8"}}


def test_a_filter_answer_uses_the_exact_pascal_case_keys(filter_body: str) -> None:
    args = extender.ExtenderArgs.model_validate_json(filter_body)
    result = extender.ExtenderFilterResult.answering(
        args, ["gpu-017", "gpu-018"], failed={"gpu-019": "leaf l07 uplinks degraded"},
        unresolvable={"gpu-031": "not in fabric ib-east"},
    )
    assert json.loads(result.model_dump_json(exclude_none=True)) == result.to_wire() == {
        "NodeNames": ["gpu-017", "gpu-018"],
        "FailedNodes": {"gpu-019": "leaf l07 uplinks degraded"},
        "FailedAndUnresolvableNodes": {"gpu-031": "not in fabric ib-east"},
        "Error": "",
    }


def test_an_empty_answer_still_names_no_nodes_rather_than_omitting_them(filter_body: str) -> None:
    # Without NodeNames the scheduler would read "no answer" rather than "none fit".
    args = extender.ExtenderArgs.model_validate_json(filter_body)
    assert extender.ExtenderFilterResult.answering(args, []).to_wire()["NodeNames"] == []


def test_a_failed_call_reports_only_the_error() -> None:
    assert extender.ExtenderFilterResult.failure("topology ib-east not synced").to_wire() == {
        "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": "topology ib-east not synced",
    }


def test_prioritize_answers_are_a_list_of_host_and_score() -> None:
    answer = extender.HostPriorityList(
        [extender.HostPriority(host="gpu-017", score=10), extender.HostPriority(host="gpu-018", score=0)]
    )
    assert json.loads(json.dumps(answer.to_wire())) == [
        {"Host": "gpu-017", "Score": 10}, {"Host": "gpu-018", "Score": 0},
    ]
    assert answer.model_dump(mode="json") == answer.to_wire()


@pytest.mark.parametrize("score", [-1, 11], ids=["below the extender minimum", "above the extender maximum"])
def test_scores_outside_zero_to_ten_are_our_bug(score: int) -> None:
    with pytest.raises(ValidationError, match=r"(?i)score"):
        extender.HostPriority(host="gpu-017", score=score)


def test_unknown_keys_from_a_newer_scheduler_are_ignored(filter_body: str) -> None:
    data = json.loads(filter_body)
    data["SomethingNew"] = {"x": 1}
    assert extender.ExtenderArgs.model_validate(data).candidate_names()[0] == "gpu-017"


@pytest.mark.parametrize(
    ("change", "field", "complaint"),
    [
        ({"Pod": None}, "Pod", "should be an object"),
        ({"Pod": "b-3"}, "Pod", "should be an object"),
        ({"Pod": {"spec": {}}}, "Pod", "no metadata.name"),
        ({"Pod": {"metadata": {"name": "p"}}}, "Pod", "no spec object"),
        ({"NodeNames": "gpu-017"}, "NodeNames", "valid array"),
        ({"NodeNames": ["gpu-017", 5]}, "NodeNames.1", "valid string"),
        ({"NodeNames": None, "Nodes": {"items": [{"metadata": {}}]}}, "Nodes.items",
         "items[0] has no metadata.name"),
    ],
    ids=[
        "a null pod is refused",
        "a pod that is not an object is refused",
        "a pod without a name is refused",
        "a pod without a spec is refused",
        "node names that are not a list are refused",
        "a node name that is not a string is refused",
        "a node without a name is refused",
    ],
)
def test_malformed_bodies_fail_naming_the_field(
    filter_body: str, change: dict[str, Any], field: str, complaint: str
) -> None:
    data = {**json.loads(filter_body), **change}
    with pytest.raises(ValidationError) as caught:
        extender.ExtenderArgs.model_validate_json(json.dumps(data))
    message = str(caught.value)
    assert f"\n{field}\n" in message and complaint in message


def test_a_body_without_a_pod_is_refused() -> None:
    with pytest.raises(ValidationError, match="Pod\n  Field required"):
        extender.ExtenderArgs.model_validate_json('{"NodeNames": []}')
