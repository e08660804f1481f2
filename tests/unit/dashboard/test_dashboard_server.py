"""The page over HTTP: routes, ETags that follow the source's version, one serialisation per
version, bad queries; and the static page, whose embedded JSON no name can break out of."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from aiohttp import test_utils
from dashboard_builders import demo_facts, gang_on

from fabricsched.dashboard import server, static_page, view


class CountingSource:
    def __init__(self, snap: view.PageSnapshot) -> None:
        self.snap = snap
        self.moved = 0
        self.reads = 0

    def version(self) -> Hashable:
        return self.moved

    def snapshot(self) -> view.PageSnapshot:
        self.reads += 1
        return self.snap


Check = Callable[[test_utils.TestClient[Any, Any]], Awaitable[None]]


def served(source: view.PageSource, check: Check) -> None:
    async def run() -> None:
        app = server.make_app(source, min_rebuild_s=0)
        async with test_utils.TestClient(test_utils.TestServer(app)) as client:
            await check(client)

    asyncio.run(run())


def test_the_data_follows_the_version_with_etags_and_reads_the_state_once_per_version() -> None:
    facts = demo_facts()
    source = CountingSource(view.PageSnapshot([facts]))

    async def check(client: test_utils.TestClient[Any, Any]) -> None:
        first = await client.get("/api/state")
        assert first.status == 200 and first.headers["Cache-Control"] == "no-cache"
        tag = first.headers["ETag"]
        assert (await first.json())["fabric"]["summary"]["hosts"] == 32
        again = await client.get("/api/state", headers={"If-None-Match": tag})
        assert again.status == 304 and again.headers["ETag"] == tag
        assert (await client.get("/api/state")).headers["ETag"] == tag
        assert source.reads == 1
        source.snap = view.PageSnapshot([facts], [gang_on(facts, ["gpu-001", "gpu-005"])])
        source.moved += 1
        moved = await client.get("/api/state", headers={"If-None-Match": tag})
        assert moved.status == 200 and moved.headers["ETag"] != tag
        assert [g["name"] for g in (await moved.json())["gangs"]] == ["train"]
        assert source.reads == 2

    served(source, check)


def test_routes_unknown_paths_and_bad_queries() -> None:
    source = CountingSource(view.PageSnapshot([demo_facts()]))

    async def check(client: test_utils.TestClient[Any, Any]) -> None:
        page = await client.get("/")
        assert page.status == 200 and "script-src" not in page.headers["Content-Security-Policy"]
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        assert (await client.get("/static/app.js")).status == 200
        for path in ("/nope", "/static/index.html", "/static/../server.py", "/api", "/api/state/x"):
            assert (await client.get(path)).status == 404, path
        bad = await client.get("/api/state?bogus=1")
        assert bad.status == 400 and "unknown query parameter 'bogus'" in (await bad.json())["error"]
        empty = await client.get("/api/state?topology=nope")
        doc = await empty.json()
        assert empty.status == 200 and doc["fabric"] is None
        assert doc["messages"] == ["no FabricTopology named 'nope'"]

    served(source, check)


def test_the_static_page_embeds_the_document_so_no_name_closes_its_script() -> None:
    facts = demo_facts()
    gang = gang_on(facts, ["gpu-001"], name="x</script><script>alert(1)</script>")
    html = static_page.render(view.PageSnapshot([facts], [gang], report={"summary": "<b>bold</b>"}))
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "alert(1)" in html and "<script>alert(1)" not in html
    start = html.index('type="application/json">') + len('type="application/json">')
    doc = json.loads(html[start:html.index("</script>", start)])
    assert doc["gangs"][0]["name"] == "x</script><script>alert(1)</script>"
    assert doc["report"] == {"summary": "<b>bold</b>"}
    assert "/static/" not in html


def test_the_address_is_checked_and_empty_turns_the_page_off() -> None:
    assert not server.DashboardOptions("").enabled
    assert server.split_address("[::1]:8082") == ("::1", 8082)
    for bad in ("8082", "host:", "host:99999", "host:\uff18\uff10"):
        try:
            server.DashboardOptions(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_while_the_state_moves_the_document_is_rebuilt_at_most_once_a_period() -> None:
    facts = demo_facts()
    source = CountingSource(view.PageSnapshot([facts]))
    now = [0.0]
    documents = server.Documents(source, min_rebuild_s=1.0, clock=lambda: now[0])
    everything = server.document.EVERYTHING
    first, _ = documents.get(everything)
    source.moved += 1
    assert documents.get(everything)[0] == first and source.reads == 1
    now[0] = 1.0
    assert documents.get(everything)[0] != first and source.reads == 2


def test_host_rows_are_serialised_again_only_when_they_change() -> None:
    facts = demo_facts()
    rows = server.document.Rows()
    first = server.document.build(view.PageSnapshot([facts]), rows=rows)
    free = {**facts.free_gpus, "gpu-001": 0}
    moved = view.FabricFacts(facts.name, facts.fabric, free, {}, facts.health)
    second = server.document.build(view.PageSnapshot([moved]), rows=rows)
    same = [a is b for a, b in zip(first["fabric"]["hosts"], second["fabric"]["hosts"], strict=True)]
    assert same.count(False) == 4  # the changed host's leaf (4 hosts), kept leaf by leaf
    assert json.loads(server.document.dumps(second, rows)) == json.loads(server.document.dumps(second))
