"""``FitOrder``: best fit top down (issue 31, the default) and ``holding``, the rule before it
(only the room the holding domain has left; the tightest host anywhere for a gang on one host),
kept as a setting (``--fit-order holding``). On each case below the two choose differently, and
``holding`` chooses what the engine chose before issue 31."""

from __future__ import annotations

import pytest
from placement_builders import FabricBuilder, all_free, gang

from fabricsched.placement import placing, request, snapshot

HOLDING = request.PlacementOptions(fit_order=request.FitOrder.HOLDING)


@pytest.mark.parametrize(("builder", "used", "ask", "top_down", "holding"), [
    pytest.param(FabricBuilder().spine("s1").leaf("l1", hosts=2).leaf("l2").leaf("l3")
                 .spine("s2").leaf("l4", hosts=3), {}, gang(2), {"l4"}, {"l1"},
                 id="a leaf in the tightest spine, or the tightest leaf anywhere"),
    pytest.param(FabricBuilder().spine("s1").leaf("l1", hosts=3).leaf("l2", hosts=4), {"l2-h3": 8}, gang(2),
                 {"l2"}, {"l1"},
                 id="equal fit: fewer whole domains broken, or the name"),
    pytest.param(FabricBuilder().spine("s1").leaf("l1").leaf("l2"),
                 {"l1-h0": 4, "l2-h0": 2, "l2-h1": 8, "l2-h2": 8}, gang(1, 4), {"l2-h0"}, {"l1-h0"},
                 id="a single pod: the tightest leaf, or the tightest host of a partly used leaf"),
    pytest.param(FabricBuilder().spine("a").leaf("a1").leaf("a2").spine("b").leaf("b1").leaf("b2"),
                 {"a1-h0": 4, "b1-h0": 8, "b1-h1": 8, "b1-h2": 8, "b2-h0": 2, "b2-h1": 8, "b2-h2": 8},
                 gang(1, 4), {"b2-h0"}, {"a1-h0"},
                 id="a single pod: the tightest spine, or the tightest host anywhere"),
])
def test_top_down_and_holding_choose_as_documented(
    builder: FabricBuilder, used: dict[str, int], ask: request.GangRequest,
    top_down: set[str], holding: set[str],
) -> None:
    fab = builder.build()
    snap, free = snapshot.build(fab), all_free(fab, used)

    def where(options: request.PlacementOptions) -> set[str]:
        plan = placing.place(snap, free, ask, options=options)
        assert isinstance(plan, request.Plan)
        # A gang's leaves; a single pod's host.
        return set(plan.ranks) if ask.pods == 1 else {fab.hosts[n].path[0] for n in plan.ranks}

    assert where(request.PlacementOptions()) == top_down
    assert where(HOLDING) == holding

