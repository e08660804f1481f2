"""The operator's few direct API calls, over the kubernetes client, and kopf's login.

Everything here is synchronous (the kubernetes client is); the event loop calls it through
``asyncio.to_thread``. API failures are ``ports.errors.ApiError``s (``errors.call``): callers never
import the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
import kubernetes

from fabricsched import listwatch
from fabricsched.api import topology as api
from fabricsched.controller import events, reporter
from fabricsched.ports import errors


class KubeconfigError(Exception):
    """The kubeconfig given to ``fabricsched run`` cannot be used."""


def configuration(kubeconfig: Path | None) -> Any:
    """A ``kubernetes.client.Configuration`` for the kubeconfig's current context, or for the
    pod's service account when ``kubeconfig`` is None."""
    config = kubernetes.client.Configuration()
    try:
        if kubeconfig is None:
            kubernetes.config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
        else:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), client_configuration=config
            )
    except (OSError, kubernetes.config.ConfigException) as e:
        where = "in-cluster service account" if kubeconfig is None else f"kubeconfig {kubeconfig}"
        raise KubeconfigError(f"cannot load {where}: {e}") from e
    return config


def api_client(kubeconfig: Path | None) -> Any:
    return kubernetes.client.ApiClient(configuration(kubeconfig))


def connection_info(kubeconfig: Path | None) -> kopf.ConnectionInfo:
    """kopf's credentials from the same kubeconfig (the client has written embedded certificates
    to files already; kopf reads them by path)."""
    login = listwatch.login_of(configuration(kubeconfig))
    return kopf.ConnectionInfo(
        server=login.server, ca_path=login.ca_path, insecure=login.insecure, username=login.username,
        password=login.password, scheme=login.scheme, token=login.token,
        certificate_path=login.certificate_path, private_key_path=login.private_key_path,
    )


def event_poster(client: Any) -> events.Post:
    # CoreV1Api is imported at the first post (in the poster's thread), not at startup: its
    # module takes over a second to import, and the first Event comes after ready.
    core: list[Any] = []

    def post(namespace: str, body: Mapping[str, Any]) -> None:
        if not core:
            core.append(kubernetes.client.CoreV1Api(client))
        event = kubernetes.client.CoreV1Event.model_validate(dict(body))
        errors.call(core[0].create_namespaced_event, namespace, event)

    return post


def status_writer(client: Any) -> reporter.WriteStatus:
    custom = kubernetes.client.CustomObjectsApi(client)

    def write(name: str, status: Mapping[str, Any]) -> None:
        # A JSON patch "add" replaces the whole status: a merge patch would keep fields the new
        # status no longer has (e.g. a domain row's parent after a tier was removed).
        patch = [{"op": "add", "path": "/status", "value": dict(status)}]
        errors.call(
            custom.patch_cluster_custom_object_status, api.GROUP, api.VERSION, api.PLURAL, name, patch,
            _content_type="application/json-patch+json",
        )

    return write
