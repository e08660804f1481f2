"""Which Prometheus the operator may ask, and with which credentials.

Two halves, kept apart on purpose:

- ``AccessPolicy`` is the operator's (``fabricsched run`` flags, set by whoever installs it): the URL
  prefixes a topology may name (anything else is never requested: a topology writer must not
  make the operator probe the cluster network) and the directories credential files may lie in
  (so a topology cannot send, say, the pod's service-account token to a Prometheus).
- ``spec.health.prometheus.access`` is the topology's: which of those files to use, TLS,
  headers. ``Resolver.endpoint`` checks it against the policy and turns it into an ``Endpoint``
  (base URL, headers, TLS context) for one round of queries.

Files are re-read when they change (a rotated Secret, a refreshed projected token), at least
every ``Resolver.max_age_s``, and every round once a JWT token's ``exp`` has passed; every read
is bounded in size and refuses anything but a regular file, so a path naming a FIFO or a device
can neither block nor flood the loop.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import stat
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fabricsched.api import prometheus_access as access_api
from fabricsched.api import topology as api

DEFAULT_CREDENTIALS_DIR = "/etc/fabricsched/prometheus"
"""Where the chart mounts the Secret named by ``telemetry.prometheus.credentialsSecret``."""
MAX_FILE_BYTES = 64 * 1024
MAX_CACHED = 256
SCHEMES = {"http": 80, "https": 443}

Reason = Literal["PrometheusNotAllowed", "CredentialsUnavailable"]


class AccessError(Exception):
    """A topology's Prometheus may not be asked, or its credentials cannot be read."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message


def clean(text: str, limit: int = 200) -> str:
    """``text`` fit for status and logs: printable, one line, at most ``limit`` characters."""
    flat = "".join(c if c.isprintable() else " " for c in text[: limit * 4])
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class _Origin:
    scheme: str
    host: str
    port: int
    path: str
    """Without its trailing slash; "" for the root."""

    @classmethod
    def parse(cls, url: str) -> _Origin:
        """A base URL, strictly: http or https, a host, no user info, query or fragment."""
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as e:
            raise ValueError(f"not a URL: {e}") from e
        if parts.scheme not in SCHEMES:
            raise ValueError("only http:// and https:// URLs")
        if not parts.hostname:
            raise ValueError("the URL names no host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("the URL may not carry user info (use access.basicAuth)")
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise ValueError("the URL may not carry a query or fragment")
        if any(seg in (".", "..") for seg in parts.path.split("/")):
            raise ValueError("the URL path may not contain . or .. segments")
        port = port or SCHEMES[parts.scheme]
        return cls(parts.scheme, parts.hostname.lower(), port, parts.path.rstrip("/"))

    def admits(self, other: _Origin) -> bool:
        """Same scheme, host and port, and ``other``'s path is this path or below it."""
        same = (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)
        return same and (other.path == self.path or other.path.startswith(self.path + "/"))

    def __str__(self) -> str:
        default = SCHEMES[self.scheme] == self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{'' if default else f':{self.port}'}{self.path}"


@dataclass(frozen=True)
class AccessPolicy:
    """What ``fabricsched run`` allows topologies to use. The default allows no URL at all."""

    allowed: tuple[_Origin, ...] = ()
    credential_dirs: tuple[Path, ...] = (Path(DEFAULT_CREDENTIALS_DIR),)

    @classmethod
    def parse(cls, urls: Sequence[str], dirs: Sequence[str] | None = None) -> AccessPolicy:
        """From the flags; raises ValueError naming the bad value."""
        allowed = []
        for url in urls:
            try:
                allowed.append(_Origin.parse(url.strip()))
            except ValueError as e:
                raise ValueError(f"--prometheus-allow-url {clean(url, 100)!r}: {e}") from e
        found = []
        for d in [DEFAULT_CREDENTIALS_DIR] if dirs is None else dirs:
            if not os.path.isabs(d):
                raise ValueError(f"--prometheus-credentials-dir {clean(d, 100)!r}: must be an absolute path")
            found.append(Path(os.path.normpath(d)))
        return cls(tuple(allowed), tuple(found))

    def check_url(self, url: str) -> str:
        """The URL to ask (normalised), or AccessError when the policy does not allow it."""
        try:
            origin = _Origin.parse(url)
        except ValueError as e:
            raise AccessError("PrometheusNotAllowed", f"{clean(url, 120)}: {e}") from e
        if not any(prefix.admits(origin) for prefix in self.allowed):
            hint = ("fabricsched run allows no Prometheus URL (--prometheus-allow-url)" if not self.allowed
                    else "it matches no --prometheus-allow-url prefix of fabricsched run")
            raise AccessError("PrometheusNotAllowed", f"{origin} is not allowed: {hint}")
        return str(origin)

    def check_file(self, path: str) -> Path:
        """The real path of a credentials file, if it lies under a credentials directory."""
        real = Path(os.path.realpath(path))
        for root in self.credential_dirs:
            top = Path(os.path.realpath(root))
            if real == top or top in real.parents:
                return real
        dirs = ", ".join(str(d) for d in self.credential_dirs) or "none"
        raise AccessError("CredentialsUnavailable", f"{clean(path, 200)} is not under a credentials "
                          "directory "
                          f"of fabricsched run (--prometheus-credentials-dir: {dirs})")


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, at most ``limit``; OSError otherwise (never blocks on a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(f"{path} is larger than {limit} bytes")
    return data


@dataclass
class _Cached:
    signature: tuple[tuple[int, int, int, int], ...]
    read_at: float
    value: object
    expires: float | None = None
    """Wall-clock expiry of a JWT bearer token: past it, the file is read again each round."""


@dataclass
class Resolver:
    """Endpoints from specs, with credential files re-read on change and after ``max_age_s``."""

    policy: AccessPolicy = field(default_factory=AccessPolicy)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    max_age_s: float = 60.0
    _cache: dict[tuple[object, ...], _Cached] = field(default_factory=dict)

    def endpoint(self, prom: api.PrometheusHealthSpec) -> Endpoint:
        url = self.policy.check_url(prom.url)
        spec = prom.access or access_api.PrometheusAccessSpec()
        headers = {h.name: h.value for h in spec.headers}
        if spec.bearer_token_file is not None:
            token = self._text(spec.bearer_token_file, "bearer token")
            headers["Authorization"] = f"Bearer {token}"
        elif spec.basic_auth is not None:
            password = self._text(spec.basic_auth.password_file, "basic auth password")
            pair = f"{spec.basic_auth.username}:{password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        context = self._tls(spec.tls) if url.startswith("https://") else None
        return Endpoint(url, headers, context)

    def forget(self) -> None:
        """Drop every cached file (after a 401: the credentials may have just been rotated)."""
        self._cache.clear()

    def _text(self, path: str, what: str) -> str:
        def parse(files: list[tuple[Path, bytes]]) -> str:
            text = files[0][1].decode("utf-8", "strict").strip()
            if not text or any(not (" " <= c <= "~") for c in text):
                raise ValueError(f"the {what} must be one line of printable ASCII")
            return text
        value = self._load((what, path), [path], parse, jwt_expiry)
        assert isinstance(value, str)
        return value

    def _tls(self, tls: access_api.PrometheusTLSSpec | None) -> ssl.SSLContext:
        spec = tls or access_api.PrometheusTLSSpec()
        named = {k: p for k, p in (("ca", spec.ca_file), ("cert", spec.cert_file), ("key", spec.key_file))
                 if p is not None}

        def build(files: list[tuple[Path, bytes]]) -> ssl.SSLContext:
            real = dict(zip(named, files, strict=True))
            ca = real["ca"][1].decode("ascii", "replace") if "ca" in real else None
            context = ssl.create_default_context(cadata=ca)
            if "cert" in real and "key" in real:
                # The stdlib loads a key pair from files only; both were just checked and bounded.
                context.load_cert_chain(real["cert"][0], real["key"][0])
            if spec.insecure_skip_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            return context
        value = self._load(("tls", spec), list(named.values()), build)
        assert isinstance(value, ssl.SSLContext)
        return value

    def _load(self, key: tuple[object, ...], paths: list[str],
              build: Callable[[list[tuple[Path, bytes]]], object],
              expiry: Callable[[object], float | None] | None = None) -> object:
        """``build`` over the files, cached while none of them changed, for ``max_age_s`` and
        until the value's ``expiry`` (wall clock)."""
        now = self.clock()
        try:
            reals = [self.policy.check_file(p) for p in paths]
            signature = tuple(_signature(os.stat(real)) for real in reals)
            cached = self._cache.get(key)
            unchanged = cached is not None and cached.signature == signature
            if cached is not None and unchanged and now - cached.read_at < self.max_age_s \
                    and (cached.expires is None or self.wall() < cached.expires):
                return cached.value
            value = build([(real, read_bounded(real)) for real in reals])
        except FileNotFoundError as e:
            missing = str(e.filename) if e.filename else ", ".join(paths)
            raise AccessError("CredentialsUnavailable",
                              f"{clean(missing, 200)} does not exist (is the Secret mounted?)") from e
        except (OSError, ValueError, ssl.SSLError) as e:
            raise AccessError("CredentialsUnavailable", f"{clean(', '.join(paths), 200)}: "
                              f"{clean(str(e) or type(e).__name__, 200)}") from e
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()  # specs that keep naming new files cannot grow the cache without end
        self._cache[key] = _Cached(signature, now, value, expiry(value) if expiry is not None else None)
        return value


def jwt_expiry(token: object) -> float | None:
    """The ``exp`` claim of a JWT (a projected service-account token, an OIDC token), if any."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    # A Secret volume swaps a symlink on update: the inode changes even when mtime does not.
    return (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True)
class Endpoint:
    """One topology's Prometheus for one round: where, which headers, which TLS."""

    url: str
    """Base URL, normalised, without a trailing slash; its path is the API's prefix (Mimir's
    ``/prometheus``)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None
    """None for http://; for https:// the context to verify the server with."""

    def __repr__(self) -> str:
        # Never print the Authorization header.
        return f"Endpoint({self.url!r}, headers={sorted(self.headers)}, tls={self.tls is not None})"
