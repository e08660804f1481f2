"""The informer against a small API server over real HTTP: paged listing, watch events, expiry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from fabricsched import listwatch
from fabricsched.controller import informer, metrics


def _node(name: str, version: int, label: str = "a") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version), "labels": {"x": label}}}


class FakeApi:
    """Serves ``/api/v1/nodes``: lists in pages, then scripted watches (one per request)."""

    def __init__(self, listings: list[list[dict[str, Any]]],
                 watches: list[list[dict[str, Any] | bytes]]) -> None:
        self.listings = listings
        self.watches = watches
        self.requests: list[Mapping[str, str]] = []
        self.encodings: list[str | None] = []

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        self.encodings.append(request.headers.get("Accept-Encoding"))
        if query.get("watch"):
            if not self.watches:
                await asyncio.sleep(0.2)  # a quiet watch the server ends (as on its timeout)
                return web.StreamResponse()
            response = web.StreamResponse()
            await response.prepare(request)
            for event in self.watches.pop(0):
                line = event if isinstance(event, bytes) else json.dumps(event).encode()
                await response.write(line + b"\n")
            return response
        items = self.listings[0]
        start = int(query.get("continue") or 0)
        limit = int(query["limit"])
        page = items[start:start + limit]
        more = start + limit < len(items)
        if not more:
            self.listings.pop(0)
        return web.json_response({"items": page, "metadata": {
            "resourceVersion": "100", **({"continue": str(start + limit)} if more else {})}})


async def _serve(api: FakeApi) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_get("/api/v1/nodes", api.nodes)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def _follow(api: FakeApi, until: Any,
                  compression: bool = False) -> tuple[dict[tuple[str, str], Mapping[str, Any]], int]:
    runner, port = await _serve(api)
    held: dict[tuple[str, str], Mapping[str, Any]] = {}
    listed = []
    kind = listwatch.Kind("node", "/api/v1/nodes", lambda b: held.__setitem__(listwatch.key_of(b), b),
                         lambda k: held.pop(k, None), lambda: list(held))
    connection = listwatch.Connection(lambda: listwatch.Login(server=f"http://127.0.0.1:{port}"), compression)
    follower = listwatch.Informer(connection, kind, informer.MetricsObserver(metrics.Metrics()),
                                  lambda: listed.append(1), page_size=2)
    task = asyncio.create_task(follower.follow())
    try:
        for _ in range(200):
            await asyncio.sleep(0.01)
            if until(held, api):
                break
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await connection.close()
        await runner.cleanup()
    return held, len(listed)


def test_a_listing_in_pages_is_applied_in_full_then_watch_events_follow_from_its_version() -> None:
    api = FakeApi(
        [[_node(f"n{i}", i) for i in range(5)]],
        [[{"type": "MODIFIED", "object": _node("n1", 101, "b")},
          {"type": "DELETED", "object": _node("n2", 102)},
          {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "150"}}},
          {"type": "ADDED", "object": _node("n9", 103)}]],
    )
    held, listed = asyncio.run(_follow(api, lambda held, api: not api.watches and ("", "n9") in held))
    assert sorted(k[1] for k in held) == ["n0", "n1", "n3", "n4", "n9"]
    assert held[("", "n1")]["metadata"]["labels"] == {"x": "b"}
    assert listed == 1
    pages = [r for r in api.requests if not r.get("watch")]
    assert len(pages) == 3  # 5 objects, 2 per page
    watches = [r for r in api.requests if r.get("watch")]
    assert watches[0]["resourceVersion"] == "100"
    assert watches[0]["allowWatchBookmarks"] == "true"


def test_listings_are_asked_for_uncompressed_unless_compression_is_on() -> None:
    # aiohttp asks for gzip by default; the API server then compresses every page over 128 KiB.
    for compression, wanted in ((False, "identity"), (True, "gzip")):
        api = FakeApi([[_node(f"n{i}", i) for i in range(3)]],
                      [[{"type": "ADDED", "object": _node("n9", 103)}]])
        held, _ = asyncio.run(_follow(api, lambda held, api: ("", "n9") in held, compression))
        assert len(held) == 4
        assert set(api.encodings) == {wanted}  # the pages and the watch


def test_a_watch_line_that_is_not_json_ends_that_watch_and_the_next_resumes_from_the_last_version() -> None:
    api = FakeApi(
        [[_node("n0", 1)]],
        [[{"type": "ADDED", "object": _node("n1", 101)}, b'{"type": "ADDED", "object": {"metadata": '],
         [{"type": "ADDED", "object": _node("n2", 102)}]],
    )
    held, _ = asyncio.run(_follow(api, lambda held, api: ("", "n2") in held))
    assert sorted(k[1] for k in held) == ["n0", "n1", "n2"]
    watches = [r for r in api.requests if r.get("watch")]
    assert [w["resourceVersion"] for w in watches[:2]] == ["100", "101"]
    assert len([r for r in api.requests if not r.get("watch")]) == 1  # no second listing


def test_hostile_values_in_events_are_parsed_and_the_watch_goes_on() -> None:
    # Whatever a pod's author wrote reaches the parser: huge strings, non-ASCII digits, numbers
    # no float holds. Each event is parsed as json.loads would; none stops the watch.
    hostile = _node("n1", 101, "x" * 100_000)
    hostile["metadata"]["annotations"] = {"q": "\u0661\u0662"}
    line = json.dumps(hostile).replace('"metadata": {', '"spec": {"big": 1e1000000}, "metadata": {', 1)
    api = FakeApi(
        [[_node("n0", 1)]],
        [[b'{"type": "MODIFIED", "object": ' + line.encode() + b"}",
          {"type": "ADDED", "object": _node("n2", 102)}]],
    )
    held, _ = asyncio.run(_follow(api, lambda held, api: ("", "n2") in held))
    assert sorted(k[1] for k in held) == ["n0", "n1", "n2"]
    assert held[("", "n1")]["spec"]["big"] == float("inf")
    assert len(held[("", "n1")]["metadata"]["labels"]["x"]) == 100_000
    assert held[("", "n1")]["metadata"]["annotations"]["q"] == "\u0661\u0662"


def test_an_expired_watch_lists_again_and_drops_what_the_new_listing_no_longer_holds() -> None:
    api = FakeApi(
        [[_node("n0", 1), _node("n1", 2), _node("n2", 3)], [_node("n0", 1), _node("n3", 5)]],
        [[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]],
    )
    held, listed = asyncio.run(_follow(api, lambda held, api: ("", "n3") in held))
    assert sorted(k[1] for k in held) == ["n0", "n3"]
    assert listed == 1  # readiness is signalled by the first listing only


def test_an_object_the_state_refuses_does_not_stop_the_others() -> None:
    api = FakeApi([[_node("n0", 1), {"metadata": {"name": "bad"}}, _node("n1", 2)]], [])

    async def run() -> dict[tuple[str, str], Mapping[str, Any]]:
        runner, port = await _serve(api)
        held: dict[tuple[str, str], Mapping[str, Any]] = {}

        def apply(body: Mapping[str, Any]) -> None:
            if "labels" not in body["metadata"]:
                raise ValueError("unparseable")
            held[listwatch.key_of(body)] = body

        kind = listwatch.Kind("node", "/api/v1/nodes", apply, lambda k: held.pop(k, None), lambda: list(held))
        connection = listwatch.Connection(lambda: listwatch.Login(server=f"http://127.0.0.1:{port}"))
        registry = metrics.Metrics()
        follower = listwatch.Informer(connection, kind, informer.MetricsObserver(registry), lambda: None)
        task = asyncio.create_task(follower.follow())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(held) == 2:
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await connection.close()
        await runner.cleanup()
        assert registry.handler_errors.labels("node")._value.get() == 1
        return held

    assert sorted(k[1] for k in asyncio.run(run())) == ["n0", "n1"]
