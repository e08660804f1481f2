"""Read-only JSON access to the API server, from a kubeconfig or the pod's service account.

The kubernetes package loads the credentials (every kubeconfig form it knows: embedded or
file certificates, tokens, exec plugins, ``KUBECONFIG`` lists, in-cluster); the requests
themselves are plain GETs over urllib3, so the generated client's changing call signatures
do not matter and its models never convert an object. Every failure leaves as ``Unreachable``
(no answer, or an answer that is not the API server's JSON), ``Refused`` (401/403) or
``BadConfig``, each with a one-line message.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

import urllib3

from fabricsched import __version__
from fabricsched.explain import bounds

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

MAX_BODY = 64 * 1024 * 1024
"""Bytes read of one response: more is not an answer explain can use."""
DEFAULT_NAMESPACE = "default"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ApiAccessError(Exception):
    """The API server could not be asked, or did not answer usefully (exit code 3)."""


class BadConfig(ApiAccessError):
    """No usable kubeconfig or service account."""


class Unreachable(ApiAccessError):
    """No answer, or an answer that is not the API server's JSON."""


class Refused(ApiAccessError):
    """401 or 403: these credentials may not read this."""


class Api:
    """GET JSON from one API server. ``get`` returns None for 404. ``namespace`` is the
    credentials' own: the kubeconfig context's, the service account's, else ``default``."""

    def __init__(self, config: Any, timeout: float, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.namespace = namespace
        self._host = str(config.host).rstrip("/")
        self._config = config
        verify = bool(getattr(config, "verify_ssl", True))
        pool_args: dict[str, Any] = {
            "cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE",
            "ca_certs": getattr(config, "ssl_ca_cert", None),
            "cert_file": getattr(config, "cert_file", None),
            "key_file": getattr(config, "key_file", None),
            "retries": False,
            "timeout": urllib3.Timeout(connect=min(timeout, 10.0), read=timeout),
        }
        if getattr(config, "tls_server_name", None):
            pool_args["server_hostname"] = config.tls_server_name
        proxy = getattr(config, "proxy", None)
        self._pool: urllib3.PoolManager = (
            urllib3.ProxyManager(proxy, **pool_args) if proxy else urllib3.PoolManager(**pool_args)
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"fabricsched-explain/{__version__}"}
        hook = getattr(self._config, "refresh_api_key_hook", None)
        if hook is not None:
            hook(self._config)  # exec plugins and expiring tokens refresh here
        keys = getattr(self._config, "api_key", None) or {}
        token = keys.get("authorization") or keys.get("BearerToken")
        if token:
            value = str(token)
            headers["Authorization"] = value if " " in value else f"Bearer {value}"
        return headers

    def get(self, path: str, **query: str | int) -> dict[str, Any] | None:
        url = self._host + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            response = self._pool.request("GET", url, headers=self._headers(), preload_content=False)
            try:
                raw = response.read(MAX_BODY + 1)
            finally:
                response.release_conn()
        except urllib3.exceptions.HTTPError as e:
            raise Unreachable(
                f"cannot reach the API server at {bounds.clean(self._host)}: {_reason(e)}"
            ) from e
        except OSError as e:
            raise Unreachable(
                f"cannot reach the API server at {bounds.clean(self._host)}: {_reason(e)}"
            ) from e
        if len(raw) > MAX_BODY:
            raise Unreachable(f"GET {path}: the answer is larger than {MAX_BODY // (1024 * 1024)} MiB")
        body = _json(raw)
        if response.status == 404:
            return None
        if response.status in (401, 403):
            what = (
                "unauthorized (the credentials were refused)" if response.status == 401 else "forbidden"
            )
            raise Refused(f"GET {path}: {what}: {_message(body)}".rstrip(": "))
        if response.status >= 400 or not isinstance(body, dict):
            raise Unreachable(f"GET {path}: HTTP {response.status} {_message(body)}".rstrip())
        return body

    def close(self) -> None:
        self._pool.clear()


def connect(kubeconfig: str | None, context: str | None, timeout: float) -> Api:
    """The API server of ``kubeconfig`` (else ``$KUBECONFIG``, else ~/.kube/config, else the
    pod's service account)."""
    from kubernetes import client, config  # imported here: `fabricsched --help` stays fast

    configuration = client.Configuration()
    try:
        if kubeconfig or _default_kubeconfig_exists() or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig or None,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
            namespace = _context_namespace(kubeconfig, context)
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            namespace = _service_account_namespace(SERVICE_ACCOUNT_NAMESPACE)
    except Exception as e:  # the loader raises anything from ConfigException to a YAML or base64 error
        where = (
            kubeconfig
            or os.environ.get("KUBECONFIG")
            or "~/.kube/config or the in-cluster service account"
        )
        raise BadConfig(f"cannot load the kubeconfig ({bounds.clean(where)}): {_reason(e)}") from e
    if not getattr(configuration, "host", None):
        raise BadConfig("the kubeconfig names no API server")
    return Api(configuration, timeout, namespace)


def _context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context in use (as kubectl picks it), else ``default``."""
    from kubernetes import config

    contexts, current = config.list_kube_config_contexts(config_file=kubeconfig or None)  # type: ignore[no-untyped-call]
    chosen = current
    if context:
        chosen = next((c for c in contexts or [] if isinstance(c, dict) and c.get("name") == context), None)
    return namespace_of_context(chosen)


def namespace_of_context(entry: object) -> str:
    """``context.namespace`` of one kubeconfig ``contexts[]`` entry, when it is a usable name."""
    inner = entry.get("context") if isinstance(entry, dict) else None
    namespace = inner.get("namespace") if isinstance(inner, dict) else None
    return namespace if isinstance(namespace, str) and _is_namespace(namespace) else DEFAULT_NAMESPACE


def _service_account_namespace(path: Path) -> str:
    try:
        with path.open("rb") as f:
            namespace = f.read(64).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return DEFAULT_NAMESPACE
    return namespace if _is_namespace(namespace) else DEFAULT_NAMESPACE


def _is_namespace(value: object) -> bool:
    """A DNS-1123 label: anything else in a kubeconfig is not a namespace to ask for."""
    return isinstance(value, str) and 0 < len(value) <= 63 and bool(_LABEL.fullmatch(value))


def _default_kubeconfig_exists() -> bool:
    paths = os.environ.get("KUBECONFIG", "")
    if paths:
        return any(Path(p).expanduser().exists() for p in paths.split(os.pathsep) if p)
    return Path("~/.kube/config").expanduser().exists()


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError):
        return raw[:200].decode(errors="replace")


def _message(body: object) -> str:
    if isinstance(body, dict):
        return bounds.text(body, "message", 200)
    return bounds.clean(body, 200)


def _reason(error: BaseException) -> str:
    # urllib3 nests the cause (NewConnectionError inside, "[Errno 111] Connection refused"):
    # its innermost message is the one a person can act on.
    while error.__cause__ is not None or error.__context__ is not None:
        inner = error.__cause__ or error.__context__
        assert inner is not None
        if not str(inner):
            break
        error = inner
    reason = getattr(error, "reason", None)
    text = str(reason) if isinstance(reason, BaseException) else str(error)
    return bounds.clean(text or type(error).__name__, 200)
