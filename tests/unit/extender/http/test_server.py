"""The HTTP server: extender v1 wire format in and out; bad bodies get 400 and serving goes on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest
from aiohttp import test_utils

from builders import make_pod
from fabricsched.api import extender as wire
from fabricsched.extender.decide import answers
from fabricsched.extender.http import server


class Fixed:
    """A decider that keeps the first node and fails the rest (the server is under test)."""

    async def filter(
        self, manifest: Mapping[str, Any], node_names: Sequence[str]
    ) -> answers.FilterAnswer:
        first, *rest = node_names
        if manifest["metadata"]["name"] == "required":
            return answers.FilterAnswer([], unresolvable=dict.fromkeys(node_names, "needs one leaf"))
        return answers.FilterAnswer([first], failed=dict.fromkeys(rest, "outside gang train/a's leaf l1"))

    def prioritize(self, manifest: Mapping[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]:
        return [(n, 10 if i == 0 else 0) for i, n in enumerate(node_names)]


Client = test_utils.TestClient[Any, Any]


def with_client(
    test: Callable[[Client], Awaitable[None]], max_body: int = server.DEFAULT_MAX_BODY_BYTES
) -> None:
    async def main() -> None:
        app = server.make_app(Fixed(), server.ServerOptions(max_body_bytes=max_body))
        async with test_utils.TestClient(test_utils.TestServer(app)) as client:
            await test(client)

    asyncio.run(main())


def args(name: str = "a-0") -> dict[str, Any]:
    return {"Pod": make_pod(name, "train").gpus(8).build(), "NodeNames": ["n1", "n2", "n3"]}


def test_filter_answers_node_names_and_failed_nodes_in_the_scheduler_keys() -> None:
    async def check(client: Client) -> None:
        response = await client.post("/filter", json=args())
        assert response.status == 200
        body = await response.json()
        assert body == {
            "NodeNames": ["n1"],
            "FailedNodes": {"n2": "outside gang train/a's leaf l1", "n3": "outside gang train/a's leaf l1"},
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }

    with_client(check)


def test_an_unresolvable_gang_fills_failed_and_unresolvable_nodes() -> None:
    async def check(client: Client) -> None:
        body = await (await client.post("/filter", json=args("required"))).json()
        assert body["NodeNames"] == [] and set(body["FailedAndUnresolvableNodes"]) == {"n1", "n2", "n3"}

    with_client(check)


def test_prioritize_answers_a_host_priority_list() -> None:
    async def check(client: Client) -> None:
        body = await (await client.post("/prioritize", json=args())).json()
        assert body == [{"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 0}, {"Host": "n3", "Score": 0}]

    with_client(check)


def test_bad_bodies_get_400_with_a_json_error_and_the_server_keeps_serving() -> None:
    whole = json.dumps(args()).encode()

    async def check(client: Client) -> None:
        cases = {
            "not json": b"{not json",
            "truncated": whole[: len(whole) // 2],
            "not an object": b"[1, 2]",
            "no pod": json.dumps({"NodeNames": ["n1"]}).encode(),
            "no nodes": json.dumps({"Pod": args()["Pod"]}).encode(),
            "oversized": b'{"Pod": "' + b"x" * 5000 + b'"}',
        }
        for what, body in cases.items():
            for verb in ("/filter", "/prioritize"):
                response = await client.post(verb, data=body, headers={"Content-Type": "application/json"})
                assert response.status == 400, (what, verb)
                error = (await response.json())["error"]
                assert isinstance(error, str) and error, what
        assert (await client.post("/filter", json=args())).status == 200

    with_client(check, max_body=4096)


def test_openapi_document_describes_both_verbs_from_the_wire_models() -> None:
    async def check(client: Client) -> None:
        document = await (await client.get("/openapi.json")).json()
        assert document["openapi"].startswith("3.")
        assert set(document["paths"]) == {"/filter", "/prioritize"}
        schemas = document["components"]["schemas"]
        assert {"Pod", "NodeNames", "Nodes"} <= set(schemas["ExtenderArgs"]["properties"])
        assert "FailedAndUnresolvableNodes" in schemas["ExtenderFilterResult"]["properties"]
        assert schemas["HostPriorityList"]["type"] == "array"

    with_client(check)


def test_a_body_cut_short_by_the_client_is_not_decided_and_serving_goes_on() -> None:
    async def check(client: Client) -> None:
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(
            b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n" + b'{"Pod": {'
        )
        await writer.drain()
        writer.write_eof()
        head = await asyncio.wait_for(reader.read(200), 5)
        writer.close()
        # Nobody is left to read an answer: a 400, or just the connection closed; never a decision.
        assert head == b"" or head.startswith(b"HTTP/1.1 400"), head
        assert (await client.post("/filter", json=args())).status == 200

    with_client(check)


NAMES = [
    ["gpu-001", "gpu-002", "gpu-010"],
    [],
    ["n1"],
    ['we"ird', "back\\slash", "tab\there", "ünïcode-node", "n1"],
]
NAME_IDS = ["dns names", "no nodes", "one node", "names that need escaping"]


@pytest.mark.parametrize("names", NAMES, ids=NAME_IDS)
@pytest.mark.parametrize("planned", ["first", "last", "absent", "none"])
def test_encoded_scores_are_what_the_wire_model_gives(names: list[str], planned: str) -> None:
    target = {"first": names[0] if names else None, "last": names[-1] if names else None,
              "absent": "not-a-candidate", "none": None}[planned]
    scores = answers.Scores(names, target)
    expected = wire.HostPriorityList.model_validate(
        [{"Host": n, "Score": 10 if n == target else 0} for n in names]
    ).to_wire()
    assert json.loads(server.encode_scores(scores)) == expected
    assert json.loads(server.encode_scores(list(scores))) == expected


@pytest.mark.parametrize("names", NAMES, ids=NAME_IDS)
def test_encoded_filter_answers_are_what_the_wire_model_gives(names: list[str]) -> None:
    request = wire.ExtenderArgs.model_validate({"Pod": args()["Pod"], "NodeNames": names})
    passed, failed = names[:1], {n: f"outside gang train/a's leaf l{i}" for i, n in enumerate(names[1:])}
    unresolvable = {"other": 'needs "one" leaf'}
    expected = wire.ExtenderFilterResult.answering(request, passed, failed, unresolvable).to_wire()
    assert json.loads(server.encode_filter(passed, failed, unresolvable)) == expected


def test_a_scheduler_without_node_cache_gets_the_passed_node_objects_back() -> None:
    async def check(client: Client) -> None:
        items = [{"metadata": {"name": n}, "status": {}} for n in ("n1", "n2")]
        request = {"Pod": args()["Pod"], "Nodes": {"items": items}}
        body = await (await client.post("/filter", json=request)).json()
        assert body["Nodes"] == {"items": [items[0]]} and "NodeNames" not in body
        assert body["FailedNodes"] == {"n2": "outside gang train/a's leaf l1"}

    with_client(check)


class Failing(Fixed):
    """A decider whose every call raises (the server must still answer and count an error)."""

    async def filter(
        self, manifest: Mapping[str, Any], node_names: Sequence[str]
    ) -> answers.FilterAnswer:
        raise RuntimeError("book unavailable")

    def prioritize(self, manifest: Mapping[str, Any], node_names: Sequence[str]) -> list[tuple[str, int]]:
        raise RuntimeError("book unavailable")


@pytest.mark.parametrize(
    ("verb", "decider", "body", "status", "outcome"),
    [
        ("filter", Fixed(), args(), 200, "ok"),
        ("prioritize", Fixed(), args(), 200, "ok"),
        ("filter", Fixed(), {"Pod": {}}, 400, "bad-request"),
        ("prioritize", Fixed(), [1, 2], 400, "bad-request"),
        ("filter", Failing(), args(), 200, "error"),
        ("prioritize", Failing(), args(), 500, "error"),
    ],
    ids=[
        "a decided filter is observed as ok",
        "a decided prioritize is observed as ok",
        "a filter body without nodes is observed as a bad request",
        "a prioritize body that is not an object is observed as a bad request",
        "a failed filter still answers 200 with the error and is observed as an error",
        "a failed prioritize answers 500 and is observed as an error",
    ],
)
def test_every_call_is_observed_once_with_its_verb_and_outcome(
    verb: str, decider: server.Decider, body: Any, status: int, outcome: str
) -> None:
    seen: list[tuple[str, float, str]] = []

    async def main() -> int:
        app = server.make_app(decider, server.ServerOptions(), lambda *call: seen.append(call))
        async with test_utils.TestClient(test_utils.TestServer(app)) as client:
            return (await client.post(f"/{verb}", json=body)).status

    assert asyncio.run(main()) == status
    assert [(v, o) for v, _, o in seen] == [(verb, outcome)]
    assert seen[0][1] >= 0
