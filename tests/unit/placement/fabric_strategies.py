"""Random small fabrics for the engine's property tests (hypothesis): 1-3 tiers, 1-4 leaves of
1-3 hosts, some elements degraded or down."""

from __future__ import annotations

from hypothesis import strategies as st
from placement_builders import FabricBuilder

from fabricsched.topology import fabric

HEALTHS = st.sampled_from(["healthy", "healthy", "healthy", "degraded", "down"])


@st.composite
def fabrics(draw: st.DrawFn) -> fabric.Fabric:
    tiers = draw(st.integers(1, 3))
    names = [("leaf", 2.0), ("spine", 1.5), ("core", 1.0)][:tiers]
    builder = FabricBuilder(tiers=names)
    leaves = draw(st.integers(1, 4))
    uppers: list[tuple[str, str]] = []
    for i in range(leaves):
        if tiers >= 3 and draw(st.booleans()):
            builder.core(f"c{i}")
        if tiers >= 2 and (i == 0 or draw(st.booleans())):
            builder.spine(f"s{i}")
            uppers.append(("spine", f"s{i}"))
        builder.leaf(f"l{i}", hosts=draw(st.integers(1, 3)), gpus=draw(st.sampled_from([2, 4, 8])))
        uppers.append(("leaf", f"l{i}"))
    for tier_name, name in uppers:
        state = draw(HEALTHS)
        if state == "degraded":
            builder.degrade(tier_name, name, draw(st.sampled_from([0.25, 0.5, 0.9])))
        elif state == "down":
            builder.down(tier_name, name)
    for host in list(builder._hosts):
        state = draw(HEALTHS)
        if state == "degraded":
            builder.degrade_host(host, draw(st.sampled_from([0.25, 0.5])))
        elif state == "down":
            builder.down_host(host)
    return builder.build()
