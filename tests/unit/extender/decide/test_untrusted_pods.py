"""Hostile pods against the real coordinator and server (cluster state, book, HTTP; no API server):
one pod's bad metadata is that pod's reason, never other gangs', restore's or housekeeping's,
and no pod makes an answer grow with its own text."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import test_utils
from extender_harness import Harness, fabric_nodes

from builders import make_node, make_pod
from fabricsched import gangs
from fabricsched.extender.decide import verdicts
from fabricsched.extender.decide.answers import FilterAnswer
from fabricsched.extender.http import server
from fabricsched.topology import quantities

POISON_RANKS = ["²", "٣", "9" * 4000]


def poison(rank: str, name: str = "poison") -> Any:
    return (make_pod(name, "tenant").gang(name, 2).annotate(gangs.RANK_ANNOTATION, rank).gpus(8)
            .scheduler("fabricsched"))


@pytest.mark.parametrize("rank", POISON_RANKS, ids=["superscript two", "arabic-indic three", "4000 nines"])
def test_a_poison_rank_on_a_bound_pod_stops_neither_restore_nor_housekeeping_nor_other_gangs(
    rank: str,
) -> None:
    h = Harness(fabric_nodes())
    h.state.apply_pod(poison(rank).on("l4-h3").build())
    h.restore()  # loops over every stored pod
    assert h.coordinator.ready
    h.coordinator.housekeeping()
    uid = h.job("a", 2)
    placed = [h.place(h.pod("a", uid, r)) for r in range(2)]
    assert len(set(placed)) == 2
    # A gang without ranks of its own: rank assignment looks at every stored pod.
    members = [make_pod(f"w-{i}", "train").gang("w", 2).gpus(8).scheduler("fabricsched") for i in range(2)]
    for member in members:  # the gang's pods exist before it is planned
        h.state.apply_pod(member.build())
    for member in members:
        h.place(member)
    h.coordinator.housekeeping()


@pytest.mark.parametrize("rank", POISON_RANKS, ids=["superscript two", "arabic-indic three", "4000 nines"])
def test_the_poison_pod_itself_fails_every_node_with_a_short_reason(harness: Harness, rank: str) -> None:
    pod = poison(rank)
    answer = harness.filter(pod)
    assert answer.passed == [] and set(answer.failed) == set(harness.state.nodes)
    (reason,) = set(answer.failed.values())
    assert gangs.RANK_ANNOTATION in reason and len(reason.encode()) <= verdicts.MAX_REASON_BYTES


@pytest.mark.parametrize("key", [gangs.GANG_SIZE_ANNOTATION, gangs.REQUIRED_TIER_ANNOTATION,
                                 gangs.PREFERRED_TIER_ANNOTATION, "fabricsched.io/locality-wait"])
def test_a_100_kb_annotation_on_500_nodes_keeps_the_answer_under_200_bytes_per_node(key: str) -> None:
    names = [f"gpu-{i:03d}" for i in range(500)]
    nodes = [make_node(n).leaf(f"l{i // 20}").spine(f"s{i // 100}").gpus(8).build()
             for i, n in enumerate(names)]
    h = Harness(nodes)
    h.restore()
    uid = h.job("big", 2)
    pod = h.pod("big", uid, 0).annotate(key, "x" * 100 * 1024)
    answer = h.filter(pod, names)
    body = server.encode_filter(answer.passed, answer.failed, answer.unresolvable)
    assert len(body) / len(names) < 200, len(body)
    for reason in (*answer.failed.values(), *answer.unresolvable.values()):
        assert len(reason.encode()) <= verdicts.MAX_REASON_BYTES
    shared = {id(r) for r in (*answer.failed.values(), *answer.unresolvable.values())}
    assert len(shared) <= 4  # one string per distinct reason, not one per node


def test_a_duplicated_rank_names_the_rank_and_where_it_is_bound(harness: Harness) -> None:
    def ranked(name: str) -> Any:
        pod = make_pod(name, "train").gang("d", 2).annotate(gangs.RANK_ANNOTATION, "0")
        return pod.gpus(8).scheduler("fabricsched")

    twin = ranked("d-0b")
    harness.state.apply_pod(twin.build())  # both pods exist, so the gang of 2 is planned
    node = harness.place(ranked("d-0"))
    answer = harness.filter(twin)
    assert answer.passed == []
    (reason,) = set(answer.failed.values())
    assert "rank 0 of gang train/d" in reason and node in reason and "0 pods" not in reason


def test_a_quantity_bomb_pod_is_read_at_once_and_does_not_fit() -> None:
    h = Harness(fabric_nodes())
    h.restore()
    bomb = make_pod("bomb", "tenant").gpus(8).scheduler("fabricsched").build()
    resources = bomb["spec"]["containers"][0]["resources"]
    resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = "1e1000000"
    resources["requests"]["example.com/foo"] = "1e1000000"
    h.state.apply_pod(bomb)
    answer: FilterAnswer = h.run(h.coordinator.filter(bomb, list(h.state.nodes)))
    assert answer.passed == []
    for reason in (*answer.failed.values(), *answer.unresolvable.values()):
        assert len(reason.encode()) <= verdicts.MAX_REASON_BYTES
    assert h.state.pods[("tenant", "bomb")].requests["example.com/foo"] == quantities.MAX_UNITS


WRONG_TYPES = {
    "metadata is a string": {"metadata": "x"},
    "labels are a list": {"metadata": {"name": "p", "labels": ["a"]}},
    "a label is a number": {"metadata": {"name": "p", "labels": {"fabricsched.io/gang": 3}}},
    "annotations are a string": {"metadata": {"name": "p", "annotations": "x"}},
    "no name": {"metadata": {}},
    "owner references are an object": {"metadata": {"name": "p", "ownerReferences": {"kind": "Job"}}},
    "containers are an object": {"metadata": {"name": "p"}, "spec": {"containers": {"a": 1}}},
    "resources are a list": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": []}]}},
    "requests are a string": {"metadata": {"name": "p"},
                              "spec": {"containers": [{"resources": {"requests": "8"}}]}},
    "a quantity is an object": {"metadata": {"name": "p"},
                                "spec": {"containers": [{"resources": {"limits": {"x.io/gpu": {"a": 1}}}}]}},
    "node name is a number": {"metadata": {"name": "p"}, "spec": {"nodeName": 5}},
    "status is a list": {"metadata": {"name": "p"}, "status": []},
}


@pytest.mark.parametrize("verb", ["/filter", "/prioritize"])
@pytest.mark.parametrize("pod", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_a_pod_with_wrong_typed_fields_gets_400_and_serving_goes_on(verb: str, pod: dict[str, Any]) -> None:
    h = Harness(fabric_nodes())
    h.restore()

    async def main() -> None:
        app = server.make_app(h.coordinator, server.ServerOptions())
        async with test_utils.TestClient(test_utils.TestServer(app)) as client:
            response = await client.post(verb, data=json.dumps({"Pod": pod, "NodeNames": ["l1-h0"]}),
                                         headers={"Content-Type": "application/json"})
            assert response.status == 400
            error = (await response.json())["error"]
            assert "pod" in error.lower()
            assert len(error) < 300, error
            good = {"Pod": make_pod("ok", "train").gpus(1).build(), "NodeNames": ["l1-h0"]}
            assert (await client.post(verb, json=good)).status == 200

    asyncio.run(main())
