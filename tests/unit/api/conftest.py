"""Fixtures for the API model tests: the full example manifests and the committed CRDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

MANIFESTS = Path(__file__).parent / "manifests"


def load_manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((MANIFESTS / name).read_text(encoding="utf-8"))
    return data


@pytest.fixture
def topology_manifest() -> dict[str, Any]:
    """The ib-east FabricTopology example, spec and status; a fresh copy per test."""
    return load_manifest("fabrictopology-ib-east.yaml")


@pytest.fixture
def placement_manifest() -> dict[str, Any]:
    """The FabricPlacement example of gang ``b``; a fresh copy per test."""
    return load_manifest("fabricplacement-b.yaml")


@pytest.fixture(scope="session")
def crd_dir(repo_root: Path) -> Path:
    return repo_root / "crds"


@pytest.fixture(scope="session")
def committed_crds(crd_dir: Path) -> dict[str, dict[str, Any]]:
    """The committed CRD documents by metadata.name."""
    docs = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(crd_dir.glob("*.yaml"))]
    return {doc["metadata"]["name"]: doc for doc in docs}


@pytest.fixture
def filter_body() -> str:
    """A filter call's body as kube-scheduler sends it (nodeCacheCapable: true, a full Pod)."""
    return (MANIFESTS / "extender-args-filter.json").read_text(encoding="utf-8")
