"""A small JSON client for the API server: what ``cluster up`` and the test kubelet need.

Why not the kubernetes package: its generated models validate and convert every object,
which costs more than the request itself when creating 150 nodes, and its content-type
defaults for PATCH differ between releases. Plain JSON over a kept-alive TLS connection
per thread is fast and predictable.
"""

from __future__ import annotations

import http.client
import json
import ssl
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from fabricsched.cluster import errors, kubeconfig

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def _ssl_context(creds: kubeconfig.Credentials) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=creds.ca_pem.decode() if creds.ca_pem else None)
    if creds.cert_pem and creds.key_pem:
        # load_cert_chain only reads files: hand it a private temporary folder, gone right after.
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "client.crt"), Path(tmp, "client.key")
            cert.write_bytes(creds.cert_pem)
            key.write_bytes(creds.key_pem)
            context.load_cert_chain(cert, key)
    return context


IDLE_REOPEN_S = 15.0
"""A kept-alive connection idle for longer is reopened before use (servers close idle ones)."""


class Client:
    """Thread-safe: each thread keeps its own connection to the API server."""

    def __init__(self, creds: kubeconfig.Credentials, timeout: float = 30.0) -> None:
        url = urllib.parse.urlsplit(creds.server)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or 443
        self._token = creds.token
        self._context = _ssl_context(creds)
        self._timeout = timeout
        self._local = threading.local()
        # Every connection, whichever thread opened it, so ``close`` leaves no socket behind.
        self._opened: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()

    @classmethod
    def from_kubeconfig(cls, path: Path, timeout: float = 30.0) -> Client:
        return cls(kubeconfig.read(path), timeout)

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - getattr(self._local, "used_at", 0.0) > IDLE_REOPEN_S:
            # Reopen rather than race the server's idle timeout: a request written into a socket
            # the server is closing fails with an EOF that says nothing about the request.
            conn.close()
            conn = None
        if conn is None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, context=self._context, timeout=self._timeout
            )
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def request(self, method: str, path: str, body: object = None,
                content_type: str = "application/json") -> tuple[int, Any]:
        """Send one request; returns (status, decoded JSON or text). Never raises for HTTP errors."""
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                raw = response.read()
                self._local.used_at = time.monotonic()
                break
            except (http.client.HTTPException, ConnectionError, ssl.SSLEOFError):
                # A kept-alive connection the server closed (over TLS that can surface as an
                # EOF while sending, before the server saw the request): reconnect once.
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        text = raw.decode(errors="replace")
        try:
            return response.status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return response.status, text

    def call(self, method: str, path: str, body: object = None,
             content_type: str = "application/json") -> Any:
        """Like ``request`` but raises ``ports.errors.ApiError`` for a status >= 400."""
        status, data = self.request(method, path, body, content_type)
        if status >= 400:
            message = data.get("message", data) if isinstance(data, dict) else data
            raise errors.api_error(method, path, status, str(message))
        return data

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._local = threading.local()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
