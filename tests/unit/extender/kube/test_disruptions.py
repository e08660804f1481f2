"""The budgets and namespaces preemption reads, followed by the list-and-watch
(``extender.kube.disruptions``): what the views hold, what a decision reads from them (no API
call while they are current), and the per-decision reads it falls back to before the first
listing or without the RBAC to watch (a small API server over real HTTP)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client

from fabricsched.extender.decide import budgets
from fabricsched.extender.kube import disruptions, evictions
from fabricsched.topology import nodes


def pod(name: str, **labels: str) -> nodes.PodUsage:
    return nodes.PodUsage("ns", name, f"uid-{name}", None, "Running", labels=labels)


def pdb(name: str, selector: object, allowed: int, namespace: str = "ns", generation: int = 1,
        observed: int = 1, version: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "generation": generation,
                         "resourceVersion": str(version)},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": observed}}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": "1"}}


# --- the budget view --------------------------------------------------------------------


def test_a_budget_covers_the_pods_its_selector_matches() -> None:
    view = disruptions.BudgetView()
    view.apply(pdb("web", {"matchLabels": {"app": "web"}}, 1))
    view.apply(pdb("db", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}, 0))
    found = view.of("ns")
    assert {b.name for b in found} == {"web", "db"}
    assert budgets.protected([pod("w-0", app="web"), pod("w-1", app="web")], found)  # 2 pods, 1 allowed
    assert not budgets.protected([pod("w-0", app="web")], found)
    assert budgets.protected([pod("d-0", app="db")], found)  # 0 allowed
    assert not budgets.protected([pod("o-0", app="other"), pod("o-1")], found)
    assert view.of("elsewhere") == ()


def test_a_stale_status_protects_and_a_new_one_frees() -> None:
    view = disruptions.BudgetView()
    view.apply(pdb("web", {"matchLabels": {"app": "web"}}, 5, generation=2, observed=1))
    assert budgets.protected([pod("w-0", app="web")], view.of("ns"))
    view.apply(pdb("web", {"matchLabels": {"app": "web"}}, 5, generation=2, observed=2))
    assert not budgets.protected([pod("w-0", app="web")], view.of("ns"))
    # No status yet (the disruption controller has not read it): stale.
    view.apply({"metadata": {"name": "new", "namespace": "ns", "generation": 1},
                "spec": {"selector": {}}})
    assert budgets.protected([pod("x-0")], view.of("ns"))


def test_a_deleted_budget_no_longer_protects() -> None:
    view = disruptions.BudgetView()
    view.apply(pdb("web", {"matchLabels": {"app": "web"}}, 0))
    assert budgets.protected([pod("w-0", app="web")], view.of("ns"))
    view.delete(("ns", "web"))
    assert view.of("ns") == () and view.known() == []


def test_the_answer_is_the_same_object_until_a_budget_of_the_namespace_changes() -> None:
    view = disruptions.BudgetView()
    view.apply(pdb("web", {"matchLabels": {"app": "web"}}, 1))
    first = view.of("ns")
    assert view.of("ns") is first
    view.apply(pdb("web", {"matchLabels": {"app": "web"}}, 0, version=2))
    assert view.of("ns") is not first


def test_an_unparsable_or_oversized_selector_covers_every_pod() -> None:
    view = disruptions.BudgetView()
    view.apply(pdb("odd", {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}, 0))
    assert budgets.protected([pod("a-0", app="anything")], view.of("ns"))
    huge = {"matchLabels": {f"k{i}": "v" for i in range(evictions.MAX_SELECTOR_TERMS + 1)}}
    view = disruptions.BudgetView()
    view.apply(pdb("huge", huge, 0))
    assert budgets.protected([pod("a-0")], view.of("ns"))
    long_value = {"matchLabels": {"app": "x" * (evictions.MAX_LABEL_VALUE + 1)}}
    view = disruptions.BudgetView()
    view.apply(pdb("long", long_value, 0))
    assert budgets.protected([pod("a-0")], view.of("ns"))
    # A null selector selects no pod (policy/v1).
    view = disruptions.BudgetView()
    view.apply(pdb("none", None, 0))
    assert not budgets.protected([pod("a-0")], view.of("ns"))


@pytest.mark.parametrize("body", [
    {"metadata": {"name": "x", "namespace": "ns"}, "spec": "a string", "status": {}},
    {"metadata": {"name": "x", "namespace": "ns"}, "spec": {}, "status": ["a list"]},
    {"metadata": {"name": 7, "namespace": "ns"}, "spec": {}, "status": {}},
])
def test_a_budget_of_the_wrong_shape_protects_its_namespace(body: dict[str, Any]) -> None:
    view = disruptions.BudgetView()
    view.apply(body)
    assert budgets.protected([pod("a-0")], view.of("ns"))


def test_a_forged_long_name_is_kept_bounded_and_deleted_by_the_same_key() -> None:
    view = disruptions.BudgetView()
    name = "n" * 5000
    view.apply(pdb(name, {}, 0, namespace="s" * 5000))
    ((held_ns, held_name),) = view.known()
    assert len(held_ns) <= disruptions.MAX_NAMESPACE and len(held_name) <= evictions.MAX_NAME
    view.delete(("s" * 5000, name))
    assert view.known() == []


def test_budgets_past_the_cap_protect_the_namespace_until_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evictions, "MAX_BUDGETS", 2)
    view = disruptions.BudgetView()
    for i in range(4):
        view.apply(pdb(f"b{i}", {"matchLabels": {"app": f"none-{i}"}}, 5))
    assert len(view.known()) == 4
    assert len(view.of("ns")) == 3  # two kept, one standing for the rest
    assert budgets.protected([pod("a-0", app="free")], view.of("ns"))
    view.delete(("ns", "b2"))
    assert budgets.protected([pod("a-0", app="free")], view.of("ns"))
    view.delete(("ns", "b3"))
    assert not budgets.protected([pod("a-0", app="free")], view.of("ns"))
    # One of the kept deleted: room for a new one.
    view.delete(("ns", "b0"))
    view.apply(pdb("b4", {"matchLabels": {"app": "free"}}, 0))
    assert budgets.protected([pod("a-0", app="free")], view.of("ns"))
    assert len(view.of("ns")) == 2


def test_a_flood_of_budgets_keeps_the_view_bounded_and_protects_where_it_overflowed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evictions, "MAX_BUDGETS", 3)
    monkeypatch.setattr(disruptions, "MAX_NAMES", 10)
    monkeypatch.setattr(disruptions, "MAX_NAMESPACES", 4)
    view = disruptions.BudgetView()
    free = [pod("a-0", app="free")]
    for _ in range(3):  # the same flood again and again: nothing more is kept
        for i in range(2000):
            view.apply(pdb(f"b{i}", {"matchLabels": {"app": "none"}}, 5, namespace=f"ns{i % 7}"))
        assert len(view.known()) == 10
    assert budgets.protected(free, view.of("ns0"))
    assert budgets.protected(free, view.of("a-namespace-never-seen")), "past the namespaces: all"
    for ns, name in view.known():  # deleting what was kept frees room, not protection
        view.delete((ns, name))
    assert view.known() == [] and budgets.protected(free, view.of("ns1"))


@pytest.mark.parametrize("hostile", [
    {"disruptionsAllowed": "\u0661\u0662", "observedGeneration": 1},  # Arabic-Indic digits
    {"disruptionsAllowed": float("inf"), "observedGeneration": 1},  # JSON 1e1000000
    {"disruptionsAllowed": 10**30, "observedGeneration": True},
])
def test_a_budget_with_hostile_numbers_allows_no_disruption(hostile: dict[str, Any]) -> None:
    view = disruptions.BudgetView()
    body = pdb("x", {"matchLabels": {"app": "a"}}, 0)
    body["status"] = hostile
    view.apply(body)
    assert budgets.protected([pod("a-0", app="a")], view.of("ns"))


def test_a_budget_with_a_100_kb_selector_is_parsed_quickly_and_covers_every_pod() -> None:
    view = disruptions.BudgetView()
    huge = {"matchLabels": {"k" * 100_000: "v" * 100_000},
            "matchExpressions": [{"key": "app", "operator": "In", "values": ["x" * 1000] * 5000}]}
    view.apply(pdb("big", huge, 0))
    (budget,) = view.of("ns")
    assert budgets.protected([pod("a-0", app="other")], view.of("ns")), "too big to read: it protects"
    assert budget.selector is not None


# --- the namespace view -------------------------------------------------------------------


def test_the_namespace_view_keeps_the_opt_out_label_only() -> None:
    view = disruptions.NamespaceView()
    view.apply(namespace("quiet", **{budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE, "team": "x"}))
    view.apply(namespace("busy", team="y"))
    assert budgets.opted_out(view.labels("quiet") or {})
    assert view.labels("quiet") == {budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE}
    assert view.labels("busy") == {}
    assert view.labels("unknown") is None
    view.apply(namespace("quiet"))  # the label removed
    assert not budgets.opted_out(view.labels("quiet") or {})
    view.delete(("", "busy"))
    assert view.known() == [("", "quiet")]


def test_a_deleted_namespace_answers_with_its_last_labels_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its pods may reach the state's watch after the namespace's DELETED event: a decision in
    # between reads memory, not the API, and an opted-out namespace stays opted out.
    monkeypatch.setattr(disruptions, "MAX_GONE", 2)
    view = disruptions.NamespaceView()
    view.apply(namespace("quiet", **{budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE}))
    for name in ("busy", "a", "b"):
        view.apply(namespace(name))
    for name in ("quiet", "busy", "a"):
        view.delete(("", name))
    assert view.known() == [("", "b")]
    assert view.labels("quiet") is None  # the oldest of three gone: forgotten, read again
    assert view.labels("busy") == {} and view.labels("a") == {}
    view.apply(namespace("busy", **{budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE}))  # made again
    view.delete(("", "busy"))
    assert budgets.opted_out(view.labels("busy") or {})
    view.delete(("", "never-seen"))
    assert view.labels("never-seen") is None


def test_the_namespace_view_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disruptions, "MAX_NAMESPACES", 2)
    view = disruptions.NamespaceView()
    for name in ("a", "b", "c"):
        view.apply(namespace(name))
    assert view.labels("c") is None and len(view.known()) == 2
    view.apply(namespace("a", **{budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE}))  # known: updated
    assert budgets.opted_out(view.labels("a") or {})


def test_a_namespace_with_labels_of_the_wrong_type_is_refused() -> None:
    view = disruptions.NamespaceView()
    with pytest.raises(ValueError):
        view.apply({"metadata": {"name": "x", "labels": {"a": 1}}})
    assert view.labels("x") is None


# --- what a decision reads ------------------------------------------------------------------


class Reads:
    """The per-decision API reads, counted."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.api_waited_s = 0.0

    async def budgets(self, namespace: str) -> Sequence[budgets.Budget]:
        self.asked.append(f"budgets {namespace}")
        self.api_waited_s += 0.001  # as ``evictions.ApiPreemptionCalls`` counts its reads
        return (budgets.covering_all("read"),)

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        self.asked.append(f"namespace {namespace}")
        self.api_waited_s += 0.001
        return {budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE}

    async def evict(self, namespace: str, name: str, uid: str) -> None:
        self.asked.append(f"evict {namespace}/{name}")


class FakeApi:
    """Serves the two collections: a listing, then a watch that sends ``events`` and ends; or
    403 for a collection in ``forbidden``."""

    def __init__(self, forbidden: frozenset[str] = frozenset()) -> None:
        self.forbidden = forbidden
        self.items = {disruptions.BUDGETS_PATH: [pdb("web", {"matchLabels": {"app": "web"}}, 0)],
                      disruptions.NAMESPACES_PATH: [namespace("ns"), namespace(
                          "quiet", **{budgets.OPT_OUT_LABEL: budgets.OPT_OUT_VALUE})]}
        self.events: dict[str, list[dict[str, Any]]] = {p: [] for p in self.items}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path in self.forbidden:
            return web.Response(status=403, text="forbidden")
        if not request.query.get("watch"):
            return web.json_response({"items": self.items[path], "metadata": {"resourceVersion": "10"}})
        response = web.StreamResponse()
        await response.prepare(request)
        while self.events[path]:
            await response.write(json.dumps(self.events[path].pop(0)).encode() + b"\n")
        await asyncio.sleep(0.05)
        return response


async def _followed(api: FakeApi, reads: Reads, check: Any) -> None:
    app = web.Application()
    app.router.add_get(disruptions.BUDGETS_PATH, api.handle)
    app.router.add_get(disruptions.NAMESPACES_PATH, api.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{port}"
    calls = disruptions.FollowedDisruptions(client.ApiClient(config), reads)
    task = asyncio.create_task(calls.follow())
    try:
        await check(calls)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()


async def _until(what: Any) -> None:
    for _ in range(300):
        if what():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached")


def test_before_the_first_listing_a_decision_reads_the_api() -> None:
    async def check(calls: disruptions.FollowedDisruptions) -> None:
        assert await calls.budgets("ns") == (budgets.covering_all("read"),)
        assert budgets.opted_out(await calls.namespace_labels("ns"))
        await calls.evict("ns", "p", "u")

    reads = Reads()

    async def run() -> None:
        await _followed(FakeApi(forbidden={disruptions.BUDGETS_PATH, disruptions.NAMESPACES_PATH}), reads,
                        check)

    asyncio.run(run())
    assert reads.asked == ["budgets ns", "namespace ns", "evict ns/p"]
    assert reads.api_waited_s == pytest.approx(0.002)  # what a decision logs as waiting for the API


def test_once_listed_a_decision_reads_no_api_and_a_budget_created_later_arrives_by_the_watch() -> None:
    api, reads = FakeApi(), Reads()

    async def check(calls: disruptions.FollowedDisruptions) -> None:
        await _until(lambda: calls.budgets_followed.current and calls.namespaces_followed.current)
        (web_budget,) = await calls.budgets("ns")
        assert web_budget.name == "web"
        assert not budgets.opted_out(await calls.namespace_labels("ns"))
        assert budgets.opted_out(await calls.namespace_labels("quiet"))
        api.events[disruptions.BUDGETS_PATH].append(
            {"type": "ADDED", "object": pdb("late", {"matchLabels": {"app": "db"}}, 0, version=11)})
        await _until(lambda: len(calls.budget_view.of("ns")) == 2)
        assert budgets.protected([pod("d-0", app="db")], await calls.budgets("ns"))
        api.events[disruptions.BUDGETS_PATH].append(
            {"type": "DELETED", "object": pdb("web", {}, 0, version=12)})
        await _until(lambda: len(calls.budget_view.of("ns")) == 1)
        assert not budgets.protected([pod("w-0", app="web")], await calls.budgets("ns"))
        assert calls.api_waited_s == 0  # answers from memory wait for no API, however long they took

    asyncio.run(_followed(api, reads, check))
    assert reads.asked == []


def test_without_the_rbac_to_watch_budgets_a_decision_reads_them_and_namespaces_from_memory() -> None:
    reads = Reads()

    async def check(calls: disruptions.FollowedDisruptions) -> None:
        await _until(lambda: calls.namespaces_followed.current and calls.budgets_followed.listed)
        assert not calls.budgets_followed.current
        assert await calls.budgets("ns") == (budgets.covering_all("read"),)
        assert not budgets.opted_out(await calls.namespace_labels("ns"))
        # A namespace the watch has not delivered yet is read.
        assert budgets.opted_out(await calls.namespace_labels("new"))

    asyncio.run(_followed(FakeApi(forbidden={disruptions.BUDGETS_PATH}), reads, check))
    assert reads.asked == ["budgets ns", "namespace new"]
