"""The engine's public API (docs/architecture.md, "The engine as a library"): the names exist, keep
their signatures, and behave; the documented example runs as printed."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import re
from pathlib import Path
from typing import Any

import pytest

from fabricsched import ids
from fabricsched.api.topology import FabricTopologySpec
from fabricsched.placement.request import GangRequest, NoFit, Plan
from fabricsched.placement.session import Session
from fabricsched.topology.building import build_fabric
from fabricsched.topology.gpus import free_of
from fabricsched.topology.nodes import NodeInfo, PodUsage

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
SECTION = "## The engine as a library"


def documented_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOC.name} lost its section {SECTION!r}"
    [code] = re.findall(r"```python\n(.*?)```", text.split(SECTION, 1)[1], flags=re.DOTALL)
    return str(code)


def test_the_documented_example_runs_and_prints_what_it_says() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(documented_example(), str(DOC), "exec"), {"__name__": "example"})
    planned, refused = out.getvalue().splitlines()
    assert planned == "('gpu-1', 'gpu-2') ('fits leaf l1',)"
    assert refused.startswith("required tier leaf: no leaf could ever hold") and refused.endswith(" True")


def test_gang_request_keeps_its_positional_signature() -> None:
    params = list(inspect.signature(GangRequest).parameters.values())
    assert [p.name for p in params[:5]] == ["key", "pods", "gpus_per_pod", "tier", "required"]
    assert (params[3].default, params[4].default) == (None, False)
    later = [p.name for p in params[5:] if p.kind is not p.KEYWORD_ONLY or p.default is p.empty]
    assert later == [], "new GangRequest fields must be keyword-only with a default"


def test_session_place_and_the_answers_keep_their_names() -> None:
    params = inspect.signature(Session().place).parameters
    assert list(params)[:3] == ["fab", "free", "gang"]
    assert params["candidates"].default is None
    assert {"ranks", "reasons"} <= {f.name for f in dataclasses.fields(Plan)}
    assert {"reason", "unresolvable"} <= {f.name for f in dataclasses.fields(NoFit)}
    assert callable(PodUsage.from_manifest) and callable(NodeInfo.from_manifest)


def node(name: str, leaf: str) -> dict[str, Any]:
    labels = {"fabric.topograph.run/tier-0": leaf, "fabric.topograph.run/tier-1": "s1"}
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


@pytest.fixture
def small() -> tuple[Any, dict[ids.NodeName, int]]:
    """Three leaves of two 8-GPU hosts under one spine; l1 has 4 GPUs taken."""
    spec = FabricTopologySpec.model_validate(
        {"tiers": [{"name": "leaf", "nodeLabel": "fabric.topograph.run/tier-0"},
                   {"name": "spine", "nodeLabel": "fabric.topograph.run/tier-1"}]}
    )
    hosts = [node(f"{leaf}-h{i}", leaf) for leaf in ("l1", "l2", "l3") for i in (0, 1)]
    fab = build_fabric(spec, [NodeInfo.from_manifest(h) for h in hosts], health={}).fabric
    free = free_of(fab, lambda host: 4 if host == "l1-h0" else 0)
    return fab, free


def test_a_gang_that_fits_lands_in_one_leaf(small: tuple[Any, dict[ids.NodeName, int]]) -> None:
    fab, free = small
    assert free[ids.NodeName("l1-h0")] == 4 and free[ids.NodeName("l2-h0")] == 8
    gang = GangRequest(ids.GangKey("t/a"), 4, 4, None, False)  # 16 GPUs: l2 or l3 holds them
    plan = Session().place(fab, free, gang, candidates=list(free))
    assert isinstance(plan, Plan)
    assert len(plan.ranks) == 4
    assert len({fab.hosts[n].path[0] for n in plan.ranks}) == 1, plan


def test_a_gang_that_cannot_fit_gives_no_fit_with_a_reason(
    small: tuple[Any, dict[ids.NodeName, int]],
) -> None:
    fab, free = small
    gang = GangRequest(ids.GangKey("t/b"), 7, 8, None, False)  # 56 GPUs of 48
    answer = Session().place(fab, free, gang, candidates=list(free))
    assert isinstance(answer, NoFit)
    assert answer.reason
