"""The operator's few direct API calls, over the kubernetes client, and kopf's login.

Everything here is synchronous (the kubernetes client is); the event loop calls it through
``asyncio.to_thread``. Errors are wrapped in our own types so callers never import the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
import kubernetes

from fabricsched.api import topology as api
from fabricsched.controller import events, reporter


class KubeconfigError(Exception):
    """The kubeconfig given to ``fabricsched run`` cannot be used."""


def configuration(kubeconfig: Path) -> Any:
    """A ``kubernetes.client.Configuration`` for the kubeconfig's current context."""
    config = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=config
        )
    except (OSError, kubernetes.config.ConfigException) as e:
        raise KubeconfigError(f"cannot load kubeconfig {kubeconfig}: {e}") from e
    return config


def api_client(kubeconfig: Path) -> Any:
    return kubernetes.client.ApiClient(configuration(kubeconfig))


def connection_info(kubeconfig: Path) -> kopf.ConnectionInfo:
    """kopf's credentials from the same kubeconfig (the client has written embedded certificates
    to files already; kopf reads them by path)."""
    config = configuration(kubeconfig)
    token = None
    scheme = None
    header = (config.api_key or {}).get("authorization") or (config.api_key or {}).get("BearerToken")
    if header:
        scheme, _, token = str(header).partition(" ")
        if not token:
            scheme, token = "Bearer", scheme
    return kopf.ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert or None,
        insecure=not config.verify_ssl,
        username=config.username or None,
        password=config.password or None,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file or None,
        private_key_path=config.key_file or None,
    )


def event_poster(client: Any) -> events.Post:
    core = kubernetes.client.CoreV1Api(client)

    def post(namespace: str, body: Mapping[str, Any]) -> None:
        core.create_namespaced_event(namespace, kubernetes.client.CoreV1Event.model_validate(dict(body)))

    return post


def status_writer(client: Any) -> reporter.WriteStatus:
    custom = kubernetes.client.CustomObjectsApi(client)

    def write(name: str, status: Mapping[str, Any]) -> None:
        # A JSON patch "add" replaces the whole status: a merge patch would keep fields the new
        # status no longer has (e.g. a domain row's parent after a tier was removed).
        patch = [{"op": "add", "path": "/status", "value": dict(status)}]
        try:
            custom.patch_cluster_custom_object_status(
                api.GROUP, api.VERSION, api.PLURAL, name, patch,
                _content_type="application/json-patch+json",
            )
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                raise reporter.Gone(name) from e
            raise

    return write
