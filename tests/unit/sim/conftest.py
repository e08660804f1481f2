"""Fixtures of the simulator tests; the builders live in ``sim_builders`` (a module of its own,
since every test folder has a ``conftest`` and the name would be ambiguous to import)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_builders import SimFiles


@pytest.fixture
def files(tmp_path: Path) -> SimFiles:
    return SimFiles(tmp_path)
