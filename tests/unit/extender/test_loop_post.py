"""``loop_post``: a JSON POST on the event loop, against a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client

from fabricsched.extender import loop_post
from fabricsched.ports import errors


async def _serve(status: int, answer: str, seen: list[dict[str, Any]]) -> tuple[web.AppRunner, str]:
    async def handle(request: web.Request) -> web.Response:
        seen.append({"path": request.path, "auth": request.headers.get("Authorization"),
                     "type": request.headers.get("Content-Type"), "body": json.loads(await request.read())})
        return web.Response(status=status, text=answer, content_type="application/json")

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def _config(host: str, token: str = "") -> client.Configuration:
    config = client.Configuration(host=host)
    if token:
        config.api_key = {"BearerToken": token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
    return config


Outcome = dict[str, Any] | BaseException


def _post(status: int, answer: str, token: str = "") -> tuple[Outcome, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def run() -> Outcome:
        runner, host = await _serve(status, answer, seen)
        poster = loop_post.LoopPoster(_config(host, token))
        try:
            return await poster.post("/apis/g/v1/namespaces/a/things", {"metadata": {"name": "x"}})
        except errors.ApiError as e:
            return e
        finally:
            await poster.close()
            await runner.cleanup()

    return asyncio.run(run()), seen


def test_the_body_goes_as_json_with_the_clients_bearer_token_and_the_answer_comes_back() -> None:
    answer, seen = _post(201, '{"metadata": {"name": "x", "generation": 1}}', token="t0ken")
    assert answer == {"metadata": {"name": "x", "generation": 1}}
    assert seen == [{"path": "/apis/g/v1/namespaces/a/things", "auth": "Bearer t0ken",
                     "type": "application/json", "body": {"metadata": {"name": "x"}}}]


@pytest.mark.parametrize(("status", "kind"), [
    (409, errors.Conflict), (422, errors.Rejected), (503, errors.Unavailable),
], ids=["a name taken is a conflict", "an invalid object is rejected", "a server error is worth a retry"])
def test_a_refusal_leaves_as_the_typed_error_of_its_status(status: int, kind: type[errors.ApiError]) -> None:
    answer, _ = _post(status, '{"kind": "Status", "message": "no"}')
    assert isinstance(answer, kind)


def test_an_answer_that_is_not_an_object_is_an_error_not_a_crash() -> None:
    answer, _ = _post(201, "[1, 2]")
    assert isinstance(answer, errors.Unavailable)


def test_no_server_is_unavailable() -> None:
    async def run() -> BaseException | None:
        poster = loop_post.LoopPoster(_config("http://127.0.0.1:9"))
        try:
            await poster.post("/x", {})
        except errors.ApiError as e:
            return e
        finally:
            await poster.close()
        return None

    assert isinstance(asyncio.run(run()), errors.Unavailable)
