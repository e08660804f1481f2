"""Shared by every test folder: the repository root, and the ``integration`` marker.

Everything under ``tests/integration`` needs the control plane binaries; marking it here,
by location, means a new integration test cannot forget the marker, and
``pytest -m "not integration"`` runs the rest without binaries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
INTEGRATION_DIR = REPO_ROOT / "tests" / "integration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT
