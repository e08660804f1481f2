"""Fixtures for the tooling checks under hack/checks/: the checker modules, loaded from their files (hack/
is not a package), and a writer of small synthetic packages in a temporary directory."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from checks_harness import CHECKS_DIR, WritePackage


def _load(name: str, file: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, CHECKS_DIR / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def structure() -> ModuleType:
    return _load("structure_check", "structure.py")


@pytest.fixture(scope="session")
def sleeps() -> ModuleType:
    return _load("sleeps_check", "test_sleeps.py")


@pytest.fixture
def write_package(tmp_path: Path) -> WritePackage:
    """``write_package({"a.py": "...", "sub/b.py": "..."})`` -> the package dir ``tmp/pkg``; every
    folder gets an ``__init__.py`` unless one is given."""

    def write(files: dict[str, str]) -> Path:
        root = tmp_path / "pkg"
        for relative, text in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text), encoding="utf-8")
        for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            (folder / "__init__.py").touch(exist_ok=True)
        return root

    return write
