"""The webhook's part of ``fabricsched run``'s flags, validated before anything starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fabricsched.api import admission, schedconfig


@dataclass(frozen=True)
class WebhookOptions:
    cert_file: Path
    """PEM serving certificate (chain) the API server verifies against the configuration's caBundle."""
    key_file: Path
    """PEM private key of ``cert_file``."""
    address: str = admission.DEFAULT_ADDRESS
    """host:port to listen on (HTTPS)."""
    gpu_resources: tuple[str, ...] = (schedconfig.DEFAULT_GPU_RESOURCE,)
    """A pod requesting (or limited to) a positive amount of one of these is a GPU pod."""
    scheduler_name: str = schedconfig.SCHEDULER_NAME
    dra_claims: bool = False
    """A pod with ``spec.resourceClaims`` is a GPU pod too (``--webhook-dra-claims``): the webhook
    reads no claim template, and the extender passes a pod whose claims hold no GPU through."""
    client_ca: Path | None = None
    """PEM CA bundle: when given, only clients showing a certificate it signed are answered (the
    API server, configured to present one); None: any TLS client, as the API server by default."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_resources", schedconfig.gpu_resources(self.gpu_resources))
        for what, path in (("certificate", self.cert_file), ("key", self.key_file),
                           ("client CA", self.client_ca)):
            if path is not None and not path.is_file():
                raise ValueError(f"webhook {what} file {str(path)[:200]!r} does not exist")
        split_address(self.address)

    @property
    def host(self) -> str:
        return split_address(self.address)[0]

    @property
    def port(self) -> int:
        return split_address(self.address)[1]


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8443`` for IPv6) -> (host, port); raises ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit() and len(port) <= 5) \
            or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {address[:80]!r}")
    return host.strip("[]"), int(port)
