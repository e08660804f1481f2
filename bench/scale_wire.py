"""The kube-scheduler's side of the extender protocol, for bench/scale_bench.py.

    python bench/scale_wire.py --passthrough 127.0.0.1:PORT   # the pass-through server
    python bench/scale_wire.py --steer 127.0.0.1:PORT         # the steering stub

- ``Caller``: POSTs ``/filter`` then ``/prioritize`` as the kube-scheduler does with
  ``nodeCacheCapable: true`` (``{"Pod": ..., "NodeNames": [...]}``; prioritize gets the names
  the filter passed, and only when more than one passed: with one node left the scheduler
  binds it without scoring) over one kept-alive connection, and times both together.
- the pass-through server: parses each body as the extender does (aiohttp + JSON) and answers
  every node passed, every score 0, in the same wire format; its latency is the floor any
  extender in Python pays for HTTP and JSON of that size. It runs as its own process, like
  ``fabricsched run``, so both get a core of their own to the same extent.
- the steering stub (``--steer``): answers the first node passed and names no other, as the
  extender answers a pod it steers, deciding nothing. Put in the extender's place for
  a throughput round, it is the ceiling of any extender that steers each pod to one node:
  what is left is the scheduler's own work, HTTP and JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    seconds: float
    """Filter plus prioritize, request written to answer read, both calls."""
    passed: list[str]
    failed: Mapping[str, str]
    error: str


class Caller:
    """One kept-alive HTTP connection to one extender (fabricsched or the pass-through)."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self._conn = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def _post(self, path: str, body: bytes) -> Any:
        self._conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = self._conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: HTTP {response.status}: {data[:300]!r}")
        return json.loads(data)

    def call(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> Answer:
        body = json.dumps({"Pod": pod, "NodeNames": list(node_names)}).encode()
        started = time.perf_counter()
        answer = self._post("/filter", body)
        passed = list(answer.get("NodeNames") or [])
        if len(passed) > 1:  # one node left: the scheduler skips scoring (schedulePod)
            self._post("/prioritize", json.dumps({"Pod": pod, "NodeNames": passed}).encode())
        seconds = time.perf_counter() - started
        return Answer(seconds, passed, answer.get("FailedNodes") or {}, answer.get("Error") or "")

    def close(self) -> None:
        self._conn.close()


def serve_passthrough(address: str, steer: bool = False) -> None:
    from aiohttp import web  # the bench's client side needs no aiohttp

    async def filter_(request: web.Request) -> web.Response:
        names = json.loads(await request.read()).get("NodeNames") or []
        passed = names[:1] if steer else names
        return web.json_response({"NodeNames": passed, "FailedNodes": {},
                                  "FailedAndUnresolvableNodes": {}, "Error": ""})

    async def prioritize(request: web.Request) -> web.Response:
        args = json.loads(await request.read())
        return web.json_response([{"Host": n, "Score": 0} for n in args.get("NodeNames") or []])

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/filter", filter_)
    app.router.add_post("/prioritize", prioritize)
    host, _, port = address.rpartition(":")
    web.run_app(app, host=host, port=int(port), access_log=None, print=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    role = parser.add_mutually_exclusive_group(required=True)
    role.add_argument("--passthrough", metavar="HOST:PORT", help="pass every node, score 0")
    role.add_argument("--steer", metavar="HOST:PORT", help="pass the first node, fail the others")
    args = parser.parse_args()
    serve_passthrough(args.steer or args.passthrough, steer=bool(args.steer))


if __name__ == "__main__":
    main()
