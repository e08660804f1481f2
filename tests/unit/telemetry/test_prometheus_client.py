"""The query client against a stand-in Prometheus API over real HTTP, and the retry backoff."""

from __future__ import annotations

import asyncio
import base64
import math
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils, web

from fabricsched.api import topology as api
from fabricsched.telemetry import access, prometheus

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


def query_against(handler: Handler, promql: str = "up", timeout_s: float = 2.0,
                  access_spec: dict[str, Any] | None = None, path: str = "/api/v1/query",
                  prefix: str = "") -> Any:
    """Serve ``handler`` at ``path`` on a free loopback port and run one query through an endpoint
    the client resolves (the server's URL + ``prefix`` allowed); returns the samples or the raised
    TelemetryError."""
    async def main() -> Any:
        app = web.Application()
        app.router.add_route("*", path, handler)
        server = test_utils.TestServer(app, host="127.0.0.1")
        await server.start_server()
        base = str(server.make_url(prefix)).rstrip("/")
        prom = api.PrometheusHealthSpec.model_validate({"url": base, "access": access_spec})
        try:
            async with prometheus.PrometheusClient(access.AccessPolicy.parse([base], ["/"])) as client:
                return await client.query(client.endpoint(prom), promql, timeout_s)
        except prometheus.TelemetryError as e:
            return e
        finally:
            await server.close()
    return asyncio.run(main())


def test_a_vector_result_becomes_samples_with_labels_and_float_values() -> None:
    seen: dict[str, str] = {}

    async def handler(request: web.Request) -> web.Response:
        seen.update({k: str(v) for k, v in (await request.post()).items()})
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"instance": "h1:9100", "device": "mlx5_0"}, "value": [1.0, "12.5"]},
            {"metric": {"instance": "h2:9100"}, "value": [1.0, "NaN"]},
            {"metric": {"instance": "h3:9100"}, "value": [1.0, "+Inf"]},
        ]}})

    samples = query_against(handler, "rate(x[5m])")
    assert seen["query"] == "rate(x[5m])"
    assert [(s.labels, s.value) for s in samples[:1]] == [({"instance": "h1:9100", "device": "mlx5_0"}, 12.5)]
    assert math.isnan(samples[1].value) and samples[2].value == math.inf


def test_a_promql_error_is_a_query_error_with_prometheus_message() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"status": "error", "errorType": "bad_data",
                                  "error": "1:5: parse error: unexpected"}, status=400)

    error = query_against(handler)
    assert isinstance(error, prometheus.TelemetryError)
    assert (error.kind, error.message) == ("query", "bad_data: 1:5: parse error: unexpected")


def test_an_http_error_without_an_api_body_is_an_http_error() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=503, text="overloaded")

    error = query_against(handler)
    assert isinstance(error, prometheus.TelemetryError) and error.kind == "http"
    assert "HTTP 503" in error.message


def test_a_range_vector_result_is_refused() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": []}})

    error = query_against(handler)
    assert isinstance(error, prometheus.TelemetryError) and error.kind == "response"
    assert "instant vector" in error.message


def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The socket is closed: nothing listens on that port now.

    async def main() -> prometheus.TelemetryError:
        async with prometheus.PrometheusClient() as client:
            with pytest.raises(prometheus.TelemetryError) as info:
                await client.query(access.Endpoint(f"http://127.0.0.1:{port}"), "up", 2.0)
            return info.value

    assert asyncio.run(main()).kind == "unreachable"


def test_a_server_slower_than_the_timeout_is_unreachable_and_says_so() -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.json_response({})

    error = query_against(handler, timeout_s=0.2)
    assert isinstance(error, prometheus.TelemetryError)
    assert (error.kind, error.message.endswith("timed out")) == ("unreachable", True)


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(0, 30.0), (1, 30.0), (2, 60.0), (3, 120.0), (5, 300.0), (50, 300.0)],
    ids=["no failure waits the interval", "the first retry waits the interval", "then it doubles",
         "and doubles again", "up to the cap", "and stays there"],
)
def test_backoff_doubles_the_interval_up_to_a_cap(failures: int, delay: float) -> None:
    assert prometheus.Backoff(30.0).delay(failures) == delay


def test_an_interval_longer_than_the_cap_is_kept() -> None:
    assert prometheus.Backoff(600.0).delay(3) == 600.0


def test_a_bearer_token_from_its_file_and_the_extra_headers_are_sent(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    seen: dict[str, str] = {}

    async def handler(request: web.Request) -> web.Response:
        seen.update(request.headers)
        return web.json_response(EMPTY)

    tenant = {"name": "X-Scope-OrgID", "value": "tenant-1"}
    assert query_against(handler, access_spec={"bearerTokenFile": str(token), "headers": [tenant]}) == []
    assert seen["Authorization"] == "Bearer s3cret"
    assert seen["X-Scope-OrgID"] == "tenant-1"


def test_basic_auth_sends_the_user_and_the_password_from_its_file(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("pa55")
    seen: dict[str, str] = {}

    async def handler(request: web.Request) -> web.Response:
        seen.update(request.headers)
        return web.json_response(EMPTY)

    query_against(handler, access_spec={"basicAuth": {"username": "fabric", "passwordFile": str(password)}})
    assert seen["Authorization"] == "Basic " + base64.b64encode(b"fabric:pa55").decode()


def test_a_path_prefix_in_the_url_is_kept_before_the_api_path() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(EMPTY)

    assert query_against(handler, path="/prometheus/api/v1/query", prefix="/prometheus/") == []


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_an_auth_error_that_names_the_status(status: int) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, text="Unauthorized\n" + "x" * 100_000)

    error = query_against(handler)
    assert isinstance(error, prometheus.TelemetryError) and error.kind == "auth"
    assert f"HTTP {status}" in error.message and len(error.message) < 400
    assert "xxx" not in error.message, "the body is not echoed"


def test_a_redirect_is_not_followed() -> None:
    followed: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/elsewhere":
            followed.append(request.path)
        return web.Response(status=307, headers={"Location": "/elsewhere"})

    error = query_against(handler, path="/{tail:.*}")
    assert isinstance(error, prometheus.TelemetryError) and error.kind == "http"
    assert "HTTP 307" in error.message and not followed


def test_an_error_text_from_the_server_is_bounded_and_printable() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"status": "error", "errorType": "bad_data",
                                  "error": "line\r\nInjected: yes " + "y" * 10_000}, status=400)

    error = query_against(handler)
    assert isinstance(error, prometheus.TelemetryError) and error.kind == "query"
    assert "\n" not in error.message and "\r" not in error.message and len(error.message) <= 350


def test_an_answer_larger_than_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "MAX_RULE_ANSWER_BYTES", 1000)

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text='{"status": "success", "pad": "' + "z" * 5000 + '"}')

    error = query_against(handler)
    assert isinstance(error, prometheus.TelemetryError) and error.kind == "response"
    assert "larger than 1000 bytes" in error.message


def test_a_url_the_policy_does_not_allow_is_a_config_error_and_nothing_is_sent() -> None:
    client = prometheus.PrometheusClient(access.AccessPolicy.parse(["http://prometheus.monitoring:9090"]))
    prom = api.PrometheusHealthSpec(url="http://169.254.169.254/latest")
    with pytest.raises(prometheus.TelemetryError) as info:
        client.endpoint(prom)
    assert (info.value.kind, info.value.reason) == ("config", "PrometheusNotAllowed")
    assert "http://169.254.169.254/latest is not allowed" in info.value.message
