"""Shared by the tests of hack/checks/: where the checkers live, and the synthetic package writer's type."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

CHECKS_DIR = Path(__file__).resolve().parents[3] / "hack" / "checks"

WritePackage = Callable[[dict[str, str]], Path]
"""``write_package({"a.py": "...", "sub/b.py": "..."})`` writes the package ``pkg`` and returns its folder."""
