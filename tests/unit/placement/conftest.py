"""Fixtures for the placement engine; the builders live in ``placement_builders``."""

from __future__ import annotations

import pytest
from placement_builders import FabricBuilder

from fabricsched.topology import fabric


@pytest.fixture
def two_spines() -> fabric.Fabric:
    """s1: l1, l2; s2: l3, l4; 4 hosts x 8 GPUs per leaf; leaves 2:1 oversubscribed."""
    return (FabricBuilder().spine("s1").leaf("l1").leaf("l2").spine("s2").leaf("l3").leaf("l4").build())
