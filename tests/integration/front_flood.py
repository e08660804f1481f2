"""Load for the front-process flood test, each part run as its own process
(``python front_flood.py MODE ...``), so the measuring never shares an interpreter lock with
the flooding, and a pacing helper for the test itself.

- ``measure EXTENDER HEALTH SECONDS BODYFILE``: ``/filter`` and ``/healthz`` in turn, one at a
  time, for SECONDS; prints the latencies in ms as JSON.
- ``webhook PORT CA SECONDS``: 16 connections posting 0.9 MB CREATE reviews of a GPU pod;
  prints the count of answers and of allowed ones.
- ``page PORT SECONDS``: 32 clients each asking ``/api/state`` with a new ``namespace=`` every time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import sys
import time
import urllib.request
import uuid
from typing import Any

import aiohttp
from waiting import pause

WEBHOOK_CLIENTS = 16
PAGE_CLIENTS = 32
REVIEW_BYTES = 900_000


def measure(extender: str, health: str, seconds: float, body_file: str) -> dict[str, list[float]]:
    body = open(body_file, "rb").read()  # noqa: SIM115 (a short script)
    found: dict[str, list[float]] = {"filter": [], "healthz": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        request = urllib.request.Request(f"http://{extender}/filter", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
        found["filter"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://{health}/healthz", timeout=30) as answer:
            answer.read()
        found["healthz"].append((time.perf_counter() - started) * 1000)
        pause(0.02)
    return found


def big_review() -> dict[str, Any]:
    pod = {"metadata": {"name": "flood", "annotations": {"filler": "x" * REVIEW_BYTES}},
           "spec": {"containers": [{"name": "c", "image": "x",
                                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "", "operation": "CREATE", "namespace": "flood", "userInfo": {"username": "flood"},
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "object": pod}}


async def flood_webhook(port: int, ca: str, seconds: float) -> dict[str, int]:
    context = ssl.create_default_context(cafile=ca)
    template = big_review()
    counts = {"sent": 0, "allowed": 0}
    end = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < end:
            template["request"]["uid"] = uuid.uuid4().hex
            body = json.dumps(template).encode()
            counts["sent"] += 1
            try:
                async with session.post(f"https://127.0.0.1:{port}/scheduler-name", data=body, ssl=context,
                                        headers={"Content-Type": "application/json"}) as answer:
                    if answer.status == 200 and (await answer.json())["response"]["allowed"]:
                        counts["allowed"] += 1
            except (aiohttp.ClientError, TimeoutError):
                pass

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        await asyncio.gather(*(client(session) for _ in range(WEBHOOK_CLIENTS)))
    return counts


async def flood_page(port: int, seconds: float) -> dict[str, int]:
    counts = {"sent": 0, "ok": 0}
    serial = itertools.count()
    end = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < end:
            counts["sent"] += 1
            try:
                async with session.get(f"http://127.0.0.1:{port}/api/state?namespace=ns-{next(serial)}") as r:
                    await r.read()
                    counts["ok"] += r.status == 200
            except (aiohttp.ClientError, TimeoutError):
                pass

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        await asyncio.gather(*(client(session) for _ in range(PAGE_CLIENTS)))
    return counts


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "measure":
        print(json.dumps(measure(argv[1], argv[2], float(argv[3]), argv[4])))
    elif mode == "webhook":
        print(json.dumps(asyncio.run(flood_webhook(int(argv[1]), argv[2], float(argv[3])))))
    elif mode == "page":
        print(json.dumps(asyncio.run(flood_page(int(argv[1]), float(argv[2])))))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
