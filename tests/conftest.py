"""Shared by every test folder: the repository root, the ``integration`` marker, and the
Kubernetes API groups' clients of the cluster tests.

Everything under ``tests/integration`` needs the control plane binaries; marking it here,
by location, means a new integration test cannot forget the marker, and
``pytest -m "not integration"`` runs the rest without binaries.

``core_v1``, ``batch_v1``, ``custom_objects`` and ``apiextensions`` wrap the ``api_client``
that the folder's conftest makes (the local control plane's in tests/integration, $KUBECONFIG's
in tests/e2e); the kubernetes client is imported only when one of them is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="session")
def core_v1(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch_v1(api_client: Any) -> Any:
    from kubernetes import client

    return client.BatchV1Api(api_client)


@pytest.fixture(scope="session")
def custom_objects(api_client: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def apiextensions(api_client: Any) -> Any:
    from kubernetes import client

    return client.ApiextensionsV1Api(api_client)
