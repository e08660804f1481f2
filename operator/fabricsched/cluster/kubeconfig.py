"""Kubeconfig files: written for each component, read back by the small REST client.

Certificates are embedded (``*-data``) so a kubeconfig stays valid when copied elsewhere.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fabricsched.cluster import certs


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def write(path: Path, server: str, ca: Path, client: certs.KeyPair, user: str,
          cluster_name: str = "fabricsched") -> Path:
    """Write a one-context kubeconfig for ``user`` authenticating with a client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name,
                      "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": user,
                   "user": {"client-certificate-data": _b64(client.cert),
                            "client-key-data": _b64(client.key)}}],
        "contexts": [{"name": f"{user}@{cluster_name}",
                      "context": {"cluster": cluster_name, "user": user}}],
        "current-context": f"{user}@{cluster_name}",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Credentials:
    """What a TLS client needs, PEM bytes in memory."""

    server: str
    ca_pem: bytes | None
    cert_pem: bytes | None
    key_pem: bytes | None
    token: str | None


def _pem(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return (base / str(entry[key])).read_bytes()
    return None


def read(path: Path) -> Credentials:
    """The current context's server and credentials (certificates or a bearer token)."""
    config = yaml.safe_load(path.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    users = config.get("users") or []
    user: dict[str, Any] = next((u["user"] for u in users if u["name"] == context.get("user")), {})
    base = path.parent
    return Credentials(
        server=str(cluster["server"]),
        ca_pem=_pem(cluster, "certificate-authority", base),
        cert_pem=_pem(user, "client-certificate", base),
        key_pem=_pem(user, "client-key", base),
        token=user.get("token"),
    )
