"""Errors of the local control plane, one type per thing that can go wrong.

Each message says what to do next (build the tools, fix a file, read a log), because
the reader is a developer at a terminal or a CI log, not a program.
"""

from __future__ import annotations


class ClusterError(Exception):
    """Base of every error this package raises."""


class MissingBinaries(ClusterError):
    """The control plane binaries are not built (``make tools``)."""


class NodesFileError(ClusterError):
    """A ``--nodes`` file is not a NodeList, List of Nodes or Node manifests we can create."""


class ComponentFailed(ClusterError):
    """A control plane process exited or never became healthy; the message ends with its log tail."""


class ApiError(ClusterError):
    """The API server answered a request with an error status."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
