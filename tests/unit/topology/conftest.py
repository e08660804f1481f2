"""Fixtures of the topology unit tests: small fabrics built with ``builders``."""

from __future__ import annotations

import pytest

import builders
from fabricsched.api import topology as api


@pytest.fixture
def two_tier() -> api.FabricTopologySpec:
    """Topograph labels: tier-0 leaf (2:1 oversubscribed), tier-1 spine."""
    return builders.make_topology([("leaf", builders.TOPOGRAPH.format(0), 2.0),
                                   ("spine", builders.TOPOGRAPH.format(1))])
