"""Errors of the local control plane, one type per thing that can go wrong.

Each message says what to do next (build the tools, fix a file, read a log), because
the reader is a developer at a terminal or a CI log, not a program. An error answer of the API
server is the seam's ``ports.errors.ApiError`` (``api_error``), as for every other adapter.
"""

from __future__ import annotations

from fabricsched.ports.errors import ApiError, type_of


class ClusterError(Exception):
    """Base of every error this package raises."""


class MissingBinaries(ClusterError):
    """The control plane binaries are not built (``make tools``)."""


class NodesFileError(ClusterError):
    """A ``--nodes`` file is not a NodeList, List of Nodes or Node manifests we can create."""


class ComponentFailed(ClusterError):
    """A control plane process exited or never became healthy; the message ends with its log tail."""


def api_error(method: str, path: str, status: int, message: str) -> ApiError:
    """The API server answered ``method path`` with an error status (a 404 is a ``NotFound``...)."""
    return type_of(status)(f"{method} {path}: HTTP {status}: {message}", status)
