"""How the operator authenticates to Prometheus: ``spec.health.prometheus.access``.

Credentials never live in a FabricTopology: the spec names files (a Secret the chart mounts
into the operator's pod), and ``fabricsched run`` reads only files under its
``--prometheus-credentials-dir`` (docs/telemetry.md). Headers are for non-secret routing
values such as a Mimir tenant (``X-Scope-OrgID``).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field, field_validator, model_validator

from fabricsched.api import openapi
from fabricsched.api.base import WireModel

MAX_HEADERS = 16
HEADER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
HEADER_VALUE = re.compile(r"^[\x20-\x7e]*$")
"""Printable ASCII, no CR or LF: a value cannot smuggle a second header."""
RESERVED_HEADERS = ("authorization", "host", "content-type", "content-length", "transfer-encoding",
                    "connection", "cookie", "proxy-authorization")
"""Headers the client sets itself (credentials come from bearerTokenFile or basicAuth)."""

_FILE_DESCRIPTION = ("Absolute path of a file in the operator's pod (a mounted Secret key), under "
                     "one of fabricsched run's --prometheus-credentials-dir directories.")
_FILE_RULES = openapi.extensions(validations=[
    openapi.cel("!self.contains('/../') && !self.endsWith('/..')", "a credentials path may not contain ..",
                reason="FieldValueInvalid"),
])

FilePath = Annotated[str, Field(min_length=2, max_length=1024, pattern=r"^/[^\x00]*$",
                                description=_FILE_DESCRIPTION, json_schema_extra=_FILE_RULES)]


def check_path(path: str | None) -> str | None:
    if path is not None and (path.endswith("/..") or "/../" in path):
        raise ValueError(f"a credentials path may not contain ..: {path[:128]}")
    return path


class BasicAuthSpec(WireModel):
    """HTTP basic authentication: the user name, and the password read from a file."""

    username: str = Field(min_length=1, max_length=256, pattern=r"^[^:\x00-\x1f\x7f]+$",
                          description="User name (not a secret; no colon).")
    password_file: FilePath

    _path = field_validator("password_file")(check_path)


class PrometheusTLSSpec(WireModel):
    """TLS towards an https:// Prometheus: whom to trust, and a client certificate."""

    model_config = ConfigDict(
        json_schema_extra=openapi.extensions(validations=[
            openapi.cel("has(self.certFile) == has(self.keyFile)", "certFile and keyFile go together",
                        field_path=".certFile", reason="FieldValueRequired"),
        ])
    )

    ca_file: FilePath | None = Field(
        default=None, description="PEM bundle of the CAs to trust; default: the system's trust store.")
    cert_file: FilePath | None = Field(default=None, description="PEM client certificate (mutual TLS).")
    key_file: FilePath | None = Field(default=None, description="PEM private key of certFile.")
    insecure_skip_verify: bool = Field(
        default=False, description="Skip verifying the server's certificate and name. For tests only.")

    _paths = field_validator("ca_file", "cert_file", "key_file")(check_path)

    @model_validator(mode="after")
    def _pair(self) -> PrometheusTLSSpec:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("certFile and keyFile go together")
        return self


class HeaderSpec(WireModel):
    """One extra request header."""

    model_config = ConfigDict(
        json_schema_extra=openapi.extensions(validations=[
            openapi.cel("!(self.name.lowerAscii() in " + str(list(RESERVED_HEADERS)) + ")",
                        "Authorization, Host, Cookie and the body headers are set by the client",
                        field_path=".name", reason="FieldValueForbidden"),
        ])
    )

    name: str = Field(min_length=1, max_length=64, pattern=HEADER_NAME.pattern,
                      description="Header name: letters, digits and dashes.")
    value: str = Field(max_length=1024, pattern=HEADER_VALUE.pattern,
                       description="Header value: printable ASCII, no line breaks.")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"header {name}: set by the client (use bearerTokenFile or basicAuth)")
        return name


class PrometheusAccessSpec(WireModel):
    """Credentials, TLS and headers of the Prometheus HTTP API (docs/telemetry.md)."""

    model_config = ConfigDict(
        json_schema_extra=openapi.extensions(validations=[
            openapi.cel("!(has(self.bearerTokenFile) && has(self.basicAuth))",
                        "bearerTokenFile and basicAuth exclude each other", field_path=".basicAuth",
                        reason="FieldValueInvalid"),
        ])
    )

    bearer_token_file: FilePath | None = Field(
        default=None, description="File holding a bearer token, sent as Authorization: Bearer. Re-read "
        "when it changes, so a rotated token is picked up.")
    basic_auth: BasicAuthSpec | None = Field(default=None, description="HTTP basic authentication.")
    tls: PrometheusTLSSpec | None = Field(default=None, description="TLS settings of an https:// URL.")
    headers: list[HeaderSpec] = Field(
        default_factory=list, max_length=MAX_HEADERS,
        description="Extra request headers that are not secrets, e.g. {name: X-Scope-OrgID, value: tenant-1} "
        "for Mimir. Authorization, Host, Cookie and the body headers are refused.",
        json_schema_extra=openapi.extensions(list_type="map", list_map_keys=["name"]),
    )

    _token = field_validator("bearer_token_file")(check_path)

    @field_validator("headers")
    @classmethod
    def _unique(cls, headers: list[HeaderSpec]) -> list[HeaderSpec]:
        names = [h.name.lower() for h in headers]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"header names must be unique; repeated: {', '.join(repeated)}")
        return headers

    @model_validator(mode="after")
    def _one_scheme(self) -> PrometheusAccessSpec:
        if self.bearer_token_file is not None and self.basic_auth is not None:
            raise ValueError("bearerTokenFile and basicAuth exclude each other")
        return self
