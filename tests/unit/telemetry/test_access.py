"""The operator's Prometheus policy (allowed URLs, credential directories) and the endpoint
resolver (credential files read, re-read on change, bounded, refused when outside the policy)."""

from __future__ import annotations

import base64
import json
import os
import ssl
from pathlib import Path
from typing import Any

import pytest

from fabricsched.api import topology as api
from fabricsched.telemetry import access

ALLOWED = ["http://prometheus.monitoring:9090", "https://mimir.example.com/prometheus"]


def prom(url: str = "http://prometheus.monitoring:9090", **access_spec: Any) -> api.PrometheusHealthSpec:
    return api.PrometheusHealthSpec.model_validate({"url": url, "access": access_spec or None})


@pytest.mark.parametrize("url", [
    "http://prometheus.monitoring:9090",
    "http://prometheus.monitoring:9090/",
    "http://PROMETHEUS.monitoring:9090",
    "https://mimir.example.com/prometheus",
    "https://mimir.example.com:443/prometheus/",
    "https://mimir.example.com/prometheus/tenant-a",
], ids=["the prefix itself", "with a trailing slash", "the host in another case", "a path prefix",
        "the scheme's default port spelled out", "a path below the prefix"])
def test_urls_under_an_allowed_prefix_are_allowed(url: str) -> None:
    access.AccessPolicy.parse(ALLOWED).check_url(url)


@pytest.mark.parametrize("url", [
    "http://prometheus.monitoring:9091",
    "http://prometheus.monitoring:90901",
    "http://prometheus.monitoring:9090.evil.example",
    "https://prometheus.monitoring:9090",
    "http://mimir.example.com/prometheus",
    "https://mimir.example.com/prometheusx",
    "https://mimir.example.com/",
    "https://mimir.example.com/prometheus/../admin",
    "http://user:pw@prometheus.monitoring:9090",
    "http://prometheus.monitoring:9090/?x=1",
    "http://kubernetes.default.svc/api",
    "file:///etc/passwd",
    "gopher://prometheus.monitoring:9090",
    "http://[::1",
], ids=["another port", "a longer port", "a host that only starts like it", "another scheme",
        "http where https is allowed", "a path that only starts like it", "the host's root",
        "a path climbing out", "user info", "a query", "the API server", "a file URL",
        "another scheme again", "not a URL"])
def test_other_urls_are_not_allowed(url: str) -> None:
    with pytest.raises(access.AccessError) as info:
        access.AccessPolicy.parse(ALLOWED).check_url(url)
    assert info.value.reason == "PrometheusNotAllowed"
    assert len(info.value.message) < 300


def test_the_default_policy_allows_no_url_and_says_which_flag_would() -> None:
    with pytest.raises(access.AccessError) as info:
        access.AccessPolicy().check_url("http://prometheus.monitoring:9090")
    assert "--prometheus-allow-url" in info.value.message


@pytest.mark.parametrize("flag", ["prometheus.monitoring:9090", "ftp://x", "http://a/?q", "http://u@a"],
                         ids=["no scheme", "another scheme", "a query", "user info"])
def test_a_bad_allow_flag_is_refused_at_start(flag: str) -> None:
    with pytest.raises(ValueError, match="--prometheus-allow-url"):
        access.AccessPolicy.parse([flag])


def test_a_relative_credentials_dir_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="--prometheus-credentials-dir"):
        access.AccessPolicy.parse([], ["secrets"])


def resolver(tmp_path: Path, clock: list[float] | None = None) -> access.Resolver:
    now = clock if clock is not None else [0.0]
    policy = access.AccessPolicy.parse(["http://prometheus.monitoring:9090", "https://prometheus.monitoring"],
                                 [str(tmp_path / "creds")])
    return access.Resolver(policy, clock=lambda: now[0])


def test_a_bearer_token_is_read_from_its_file_and_re_read_when_the_file_changes(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "token").write_text("one\n")
    r = resolver(tmp_path)
    spec = prom(bearerTokenFile=str(creds / "token"))
    assert r.endpoint(spec).headers["Authorization"] == "Bearer one"
    # A Secret volume update swaps the file (a new inode), as the kubelet's atomic writer does.
    (creds / "token.new").write_text("two\n")
    os.replace(creds / "token.new", creds / "token")
    assert r.endpoint(spec).headers["Authorization"] == "Bearer two"


def test_a_token_rewritten_in_place_is_re_read_after_the_max_age(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    token = creds / "token"
    token.write_text("aaa")
    clock = [0.0]
    r = resolver(tmp_path, clock)
    spec = prom(bearerTokenFile=str(token))
    assert r.endpoint(spec).headers["Authorization"] == "Bearer aaa"
    stat = token.stat()
    token.write_text("bbb")  # same size; put the old times back: no visible change
    os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert r.endpoint(spec).headers["Authorization"] == "Bearer aaa", "cached within the max age"
    clock[0] += r.max_age_s
    assert r.endpoint(spec).headers["Authorization"] == "Bearer bbb"


def test_a_missing_token_file_is_a_clear_credentials_error(tmp_path: Path) -> None:
    (tmp_path / "creds").mkdir()
    with pytest.raises(access.AccessError) as info:
        resolver(tmp_path).endpoint(prom(bearerTokenFile=str(tmp_path / "creds" / "token")))
    assert info.value.reason == "CredentialsUnavailable"
    assert info.value.message == f"{tmp_path / 'creds' / 'token'} does not exist (is the Secret mounted?)"


@pytest.mark.parametrize("where", ["outside", "symlink out"],
                         ids=["a file outside", "a symlink pointing out"])
def test_a_credentials_file_outside_the_credentials_dirs_is_refused(tmp_path: Path, where: str) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    secret = tmp_path / "service-account-token"
    secret.write_text("do-not-send")
    path = secret
    if where == "symlink out":
        path = creds / "token"
        path.symlink_to(secret)
    with pytest.raises(access.AccessError) as info:
        resolver(tmp_path).endpoint(prom(bearerTokenFile=str(path)))
    assert info.value.reason == "CredentialsUnavailable"
    assert "not under a credentials directory" in info.value.message


@pytest.mark.parametrize("content", [b"", b"two\nlines", b"\xff\xfe", b"x" * (access.MAX_FILE_BYTES + 1)],
                         ids=["empty", "two lines", "not UTF-8", "too large"])
def test_an_unusable_token_is_a_credentials_error(tmp_path: Path, content: bytes) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "token").write_bytes(content)
    with pytest.raises(access.AccessError) as info:
        resolver(tmp_path).endpoint(prom(bearerTokenFile=str(creds / "token")))
    assert info.value.reason == "CredentialsUnavailable"
    assert "x" * 100 not in info.value.message


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    os.mkfifo(creds / "token")
    with pytest.raises(access.AccessError, match="not a regular file"):
        resolver(tmp_path).endpoint(prom(bearerTokenFile=str(creds / "token")))


def test_https_gets_a_verifying_context_and_insecure_skip_verify_turns_it_off(tmp_path: Path) -> None:
    (tmp_path / "creds").mkdir()
    r = resolver(tmp_path)
    assert r.endpoint(prom("http://prometheus.monitoring:9090")).tls is None
    strict = r.endpoint(prom("https://prometheus.monitoring")).tls
    assert strict is not None and strict.verify_mode == ssl.CERT_REQUIRED and strict.check_hostname
    loose = r.endpoint(prom("https://prometheus.monitoring", tls={"insecureSkipVerify": True})).tls
    assert loose is not None and loose.verify_mode == ssl.CERT_NONE


def test_a_ca_file_that_is_not_pem_is_a_credentials_error(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "ca.crt").write_text("not a certificate")
    with pytest.raises(access.AccessError) as info:
        resolver(tmp_path).endpoint(prom("https://prometheus.monitoring",
                                         tls={"caFile": str(creds / "ca.crt")}))
    assert info.value.reason == "CredentialsUnavailable"


def test_the_endpoint_repr_never_shows_the_credentials(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "token").write_text("s3cret")
    endpoint = resolver(tmp_path).endpoint(prom(bearerTokenFile=str(creds / "token")))
    assert "s3cret" not in repr(endpoint) and "Authorization" in repr(endpoint)


@pytest.mark.parametrize(("spec", "message"), [
    ({"bearerTokenFile": "token"}, "String should match pattern"),
    ({"bearerTokenFile": "/etc/../var/run/secrets/token"}, "may not contain .."),
    ({"bearerTokenFile": "/a", "basicAuth": {"username": "u", "passwordFile": "/b"}}, "exclude each other"),
    ({"tls": {"certFile": "/c"}}, "certFile and keyFile go together"),
    ({"headers": [{"name": "Authorization", "value": "Bearer x"}]}, "set by the client"),
    ({"headers": [{"name": "X-Tenant", "value": "a\r\nX-Evil: 1"}]}, "String should match pattern"),
    ({"headers": [{"name": "bad name", "value": "x"}]}, "String should match pattern"),
], ids=["a relative path", "a path climbing out", "two credential kinds", "a certificate without its key",
        "an Authorization header", "a header value with a line break", "a header name with a space"])
def test_the_access_model_refuses_bad_specs(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prom(**spec)


def jwt(exp: float) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none'})}.{part({'exp': exp})}.sig"


def test_an_expired_jwt_is_read_again_even_when_the_file_looks_unchanged(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    token = creds / "token"
    old, new = jwt(1000.0), jwt(5000.0)
    token.write_text(old)
    wall = [999.0]
    policy = access.AccessPolicy.parse(["http://prometheus.monitoring:9090"], [str(creds)])
    r = access.Resolver(policy, clock=lambda: 0.0, wall=lambda: wall[0])
    spec = prom(bearerTokenFile=str(token))
    assert r.endpoint(spec).headers["Authorization"] == f"Bearer {old}"
    stat = token.stat()
    assert len(new) == len(old)
    token.write_text(new)  # rewritten in place, same size and times: no visible change
    os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert access.jwt_expiry(old) == 1000.0 and access.jwt_expiry("not.a-jwt") is None
    assert r.endpoint(spec).headers["Authorization"] == f"Bearer {old}", "cached until it expires"
    wall[0] = 1000.0
    assert r.endpoint(spec).headers["Authorization"] == f"Bearer {new}"
