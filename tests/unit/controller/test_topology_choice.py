"""Which topology the extender plans a gang in: only nodes in a fabric count."""

from __future__ import annotations

from controller_harness import Harness, gpu_node, topology_body

import builders
from fabricsched import ids


def test_nodes_left_out_of_a_fabric_do_not_make_their_topology_the_choice(harness: Harness) -> None:
    # "ib" selects three nodes that all lack the spine label (missingTierLabel: no fabric host);
    # "eth" holds one node in full. The gang's candidates are all four: "eth" is the only
    # topology that can hold any of them.
    harness.state.apply_topology("ib", topology_body())
    harness.state.apply_topology("eth", topology_body(
        "eth", uid="uid-eth", nodeSelector={"matchLabels": {"pool": "eth"}}))
    unlabelled = [f"bad-{i}" for i in range(3)]
    for name in unlabelled:
        harness.state.apply_node(builders.make_node(name).leaf("l1").gpus(8).label("gpu", "yes").build())
    harness.state.apply_node(gpu_node("good").unlabel("gpu").label("pool", "eth").build())
    harness.state.mark_synced()
    ib = harness.state.snapshot(ids.TopologyName("ib"))
    assert ib is not None and not ib.fabric.hosts
    candidates = [ids.NodeName(n) for n in [*unlabelled, "good"]]
    assert harness.state.topology_holding_most(candidates) == "eth"
    only_bad = [ids.NodeName(n) for n in unlabelled]
    assert harness.state.topology_holding_most(only_bad) is None
