"""Each view is built once per state version whatever the query (issue 29: 64 clients asking
a new ``namespace=`` each time made every request a rebuild): the fabric part is made once per
version and topology, every answer still equals the document built from nothing, and the
answers kept per version are bounded."""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

import pytest
from dashboard_builders import demo_facts, gang_on

from fabricsched.dashboard import document, server, view


class Source:
    def __init__(self, snap: view.PageSnapshot) -> None:
        self.snap = snap
        self.moved = 0

    def version(self) -> Hashable:
        return self.moved

    def snapshot(self) -> view.PageSnapshot:
        return self.snap


def test_a_thousand_new_queries_build_the_fabric_once_and_answer_as_a_fresh_build(
        monkeypatch: pytest.MonkeyPatch) -> None:
    facts = demo_facts()
    snap = view.PageSnapshot([facts], [gang_on(facts, ["gpu-001", "gpu-005"])])
    source = Source(snap)
    documents = server.Documents(source, min_rebuild_s=0)
    built = []
    real = document._fabric

    def counting(*args: Any) -> Any:
        built.append(args[0].name)
        return real(*args)

    monkeypatch.setattr(document, "_fabric", counting)
    selections = [document.Selection(namespace="team" if i % 10 == 0 else f"ns-{i}") for i in range(1000)]
    bodies = [documents.get(s)[1] for s in selections]
    assert built == ["demo"]
    assert len(documents._bodies) == server.MAX_CACHED
    source.moved += 1
    documents.get(document.Selection(namespace="other"))
    assert built == ["demo", "demo"]
    monkeypatch.undo()
    for selection, body in zip(selections[:50], bodies, strict=False):
        fresh = document.build(snap, selection)
        fresh["version"] = 1
        assert json.loads(body) == fresh


def test_the_kept_answers_go_least_recently_asked_first() -> None:
    documents = server.Documents(Source(view.PageSnapshot([demo_facts()])), min_rebuild_s=0)
    first = documents.get(document.Selection(namespace="kept"))
    for i in range(server.MAX_CACHED * 3):
        assert documents.get(document.Selection(namespace="kept")) is first
        documents.get(document.Selection(namespace=f"ns-{i}"))
