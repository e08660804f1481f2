"""Fixtures of the controller unit tests (builders in ``controller_harness``)."""

from __future__ import annotations

import pytest
from controller_harness import Harness, topology_body


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def synced(harness: Harness) -> Harness:
    """Topology ``ib`` over leaves l1 and l2 (two nodes each), initial listings applied."""
    harness.state.apply_topology("ib", topology_body())
    harness.fabric({"l1": 2, "l2": 2})
    harness.state.mark_synced()
    return harness

