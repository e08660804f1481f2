"""The small API client reconnects once when the server dropped a kept-alive connection."""

from __future__ import annotations

import http.client
import ssl
import time
from typing import Any

import pytest

from fabricsched.cluster import kubeconfig, rest


class _Response:
    status = 200

    def read(self) -> bytes:
        return b'{"kind": "Namespace"}'


class _Connection:
    """Fails its first request with ``failure``, then answers."""

    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure
        self.closed = False

    def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> None:
        if self.failure is not None:
            raise self.failure

    def getresponse(self) -> _Response:
        return _Response()

    def close(self) -> None:
        self.closed = True


class _ScriptedClient(rest.Client):
    def __init__(self, connections: list[_Connection]) -> None:
        super().__init__(kubeconfig.Credentials("https://127.0.0.1:6443", None, None, None, "t"))
        self.scripted = connections
        self.handed_out: list[_Connection] = []

    def _connection(self) -> Any:
        if getattr(self._local, "conn", None) is None:
            self._local.conn = self.scripted.pop(0)
            self.handed_out.append(self._local.conn)
        return self._local.conn


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), id="TLS EOF while sending"),
        pytest.param(ConnectionResetError(), id="connection reset"),
        pytest.param(http.client.RemoteDisconnected(), id="remote closed before answering"),
    ],
)
def test_a_dropped_kept_alive_connection_is_reopened_once(failure: BaseException) -> None:
    client = _ScriptedClient([_Connection(failure), _Connection(None)])
    assert client.call("GET", "/api/v1/namespaces/default") == {"kind": "Namespace"}
    assert client.handed_out[0].closed


def test_a_second_failure_in_a_row_is_raised() -> None:
    client = _ScriptedClient([_Connection(ConnectionResetError()), _Connection(ConnectionResetError())])
    with pytest.raises(ConnectionResetError):
        client.call("GET", "/api/v1/namespaces/default")


def test_a_connection_idle_past_the_limit_is_reopened_before_use() -> None:
    client = rest.Client(kubeconfig.Credentials("https://127.0.0.1:6443", None, None, None, "t"))
    first = client._connection()
    client._local.used_at = time.monotonic()
    assert client._connection() is first
    client._local.used_at = time.monotonic() - rest.IDLE_REOPEN_S - 1
    assert client._connection() is not first
    client.close()
