"""Fixtures of the extender unit tests; the harness itself is in ``extender_harness``
(a module of its own, so test modules can import it without a second ``conftest``)."""

from __future__ import annotations

import pytest
from extender_harness import Harness, fabric_nodes


@pytest.fixture
def harness() -> Harness:
    h = Harness(fabric_nodes())
    h.restore()
    return h
