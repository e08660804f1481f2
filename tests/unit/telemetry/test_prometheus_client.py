"""The query client against a stand-in Prometheus API over real HTTP, and the retry backoff."""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import test_utils, web

from fabricsched.telemetry import prometheus

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def query_against(handler: Handler, promql: str = "up", timeout_s: float = 2.0) -> Any:
    """Serve ``handler`` at /api/v1/query on a free loopback port and run one query; returns the
    samples or the raised TelemetryError."""
    async def main() -> Any:
        app = web.Application()
        app.router.add_route("*", "/api/v1/query", handler)
        server = test_utils.TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with prometheus.PrometheusClient() as client:
                return await client.query(str(server.make_url("/")), promql, timeout_s)
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
                await client.query(f"http://127.0.0.1:{port}", "up", 2.0)
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
