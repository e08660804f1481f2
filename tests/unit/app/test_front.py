"""The front process: a real child of this test, fed snapshots over its pipe, serving the
webhook over TLS and the page; started again after a kill -9; gone when its task stops."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import ssl
import urllib.request
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from fabricsched import ids
from fabricsched.api import admission
from fabricsched.api import topology as api
from fabricsched.app import front, front_link, front_wire
from fabricsched.cluster import certs, processes, samples
from fabricsched.dashboard import server as dashboard_server
from fabricsched.dashboard import view
from fabricsched.topology import building, nodes
from fabricsched.webhook import options as webhook_options

REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "u-1", "operation": "CREATE", "namespace": "team",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "object": {"metadata": {"name": "w-0"},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}


def demo() -> view.FabricFacts:
    spec = api.FabricTopologySpec.model_validate(samples.demo_topology()["spec"])
    infos = [nodes.NodeInfo.from_manifest(m) for m in samples.demo_nodes()]
    fab = building.build_fabric(spec, infos, {}).fabric
    return view.FabricFacts(ids.TopologyName("demo"), fab, {n: h.gpus for n, h in fab.hosts.items()}, {}, {})


class Source:
    def __init__(self) -> None:
        self.generation = 1
        self.facts = demo()

    def version(self) -> Hashable:
        return self.generation

    def snapshot(self) -> view.PageSnapshot:
        return view.PageSnapshot([self.facts])


def test_frames_carry_a_fabric_once_and_keep_its_identity() -> None:
    facts = demo()
    encoder, decoder = front_wire.Encoder(), front_wire.Decoder()
    first = encoder.encode(1, view.PageSnapshot([facts]))
    second = encoder.encode(2, view.PageSnapshot([facts]))
    assert len(second) < len(first) / 3  # the fabric travels once
    _, one = decoder.decode(first[8:])
    version, two = decoder.decode(second[8:])
    assert version == 2 and two.fabrics[0].fabric is one.fabrics[0].fabric
    with pytest.raises(front_wire.BrokenFrame):
        front_wire.Decoder().decode(second[8:])  # a token never sent


@pytest.fixture
def pki(tmp_path: Path) -> certs.Pki:
    return certs.generate(tmp_path / "pki", datetime.datetime.now(datetime.UTC))


def options_for(pki: certs.Pki, tmp_path: Path, client_ca: Path | None = None) -> front.FrontOptions:
    serving = certs.issue_serving(tmp_path / "pki", "webhook", "webhook", ["localhost"], ["127.0.0.1"],
                                  datetime.datetime.now(datetime.UTC))
    hook_port, page_port = processes.free_ports(2)
    hook = webhook_options.WebhookOptions(serving.cert, serving.key, f"127.0.0.1:{hook_port}",
                                          client_ca=client_ca)
    return front.FrontOptions(hook, dashboard_server.DashboardOptions(f"127.0.0.1:{page_port}"))


def post_review(options: front.FrontOptions, pki: certs.Pki, client: certs.KeyPair | None = None) -> Any:
    assert options.webhook is not None
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    request = urllib.request.Request(f"https://{options.webhook.address}{admission.PATH}",
                                     data=json.dumps(REVIEW).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return json.loads(answer.read())


def get_state(options: front.FrontOptions) -> Any:
    with urllib.request.urlopen(f"http://{options.dashboard.address}/api/state", timeout=10) as answer:
        return json.loads(answer.read())


async def until(what: str, check: Any, timeout: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        found = await asyncio.to_thread(check)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def test_the_front_serves_both_is_restarted_after_a_kill_and_stops_with_its_task(
        pki: certs.Pki, tmp_path: Path) -> None:
    options = options_for(pki, tmp_path)
    source = Source()

    async def main() -> None:
        link = front_link.Front(options, source, interval_s=0.1)
        assert link.not_ready() is not None
        task = asyncio.create_task(link.run())
        await until("ready", lambda: link.not_ready() is None)
        answer = await asyncio.to_thread(post_review, options, pki)
        assert answer["response"]["allowed"] is True and answer["response"]["patchType"] == "JSONPatch"
        doc = await until("the demo fabric on the page", lambda: (d := get_state(options))["topology"] and d)
        assert doc["fabric"]["summary"]["hosts"] == 32
        first = link.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await until("a second front", lambda: link.starts == 2 and link.pid != first)
        await until("the page again", lambda: _answers(options))
        second = link.pid
        assert second is not None
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not alive(second)

    asyncio.run(main())


def _answers(options: front.FrontOptions) -> bool:
    try:
        return bool(get_state(options)["topology"])
    except OSError:
        return False


def test_with_a_client_ca_only_clients_it_signed_are_answered(pki: certs.Pki, tmp_path: Path) -> None:
    options = options_for(pki, tmp_path, client_ca=pki.ca.cert)

    async def main() -> None:
        link = front_link.Front(options, None)
        task = asyncio.create_task(link.run())
        try:
            await until("ready", lambda: link.not_ready() is None)
            answer = await asyncio.to_thread(post_review, options, pki, pki.admin)
            assert answer["response"]["allowed"] is True
            with pytest.raises((ssl.SSLError, OSError)):
                await asyncio.to_thread(post_review, options, pki)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


class CountingSource(Source):
    def __init__(self) -> None:
        super().__init__()
        self.snapshots = 0

    def snapshot(self) -> view.PageSnapshot:
        self.snapshots += 1
        return super().snapshot()


def test_the_facts_go_to_the_front_only_while_the_page_is_read(pki: certs.Pki, tmp_path: Path) -> None:
    options = options_for(pki, tmp_path)
    source = CountingSource()

    async def main() -> None:
        link = front_link.Front(options, source, interval_s=0.05)
        task = asyncio.create_task(link.run())
        try:
            await until("ready", lambda: link.not_ready() is None)
            source.generation += 1
            await asyncio.sleep(0.5)  # ten intervals with a new version each, and nobody reading
            source.generation += 1
            assert source.snapshots == 0
            # The first query after the quiet spell waits for its frame: the fabric, not an empty page.
            doc = await asyncio.to_thread(get_state, options)
            assert doc["fabric"]["summary"]["hosts"] == 32 and source.snapshots == 1
            # While it is read, a new version is sent within an interval or so.
            source.generation += 1
            await until("the new version sent", lambda: source.snapshots == 2, timeout=5)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_received_asks_fresh_after_a_quiet_spell_and_waits_for_the_frame_bounded() -> None:
    asked: list[bytes] = []
    now = [100.0]
    received = front_wire.Received(asked.append, clock=lambda: now[0])

    async def main() -> None:
        # A frame arrives while the first query waits: it returns at once with it.
        waiting = asyncio.create_task(received.settle())
        await asyncio.sleep(0.05)
        assert asked == [front_wire.FRESH] and not waiting.done()
        received.put(1, view.PageSnapshot([demo()]))
        await asyncio.wait_for(waiting, 1)
        now[0] += front_wire.ASK_EVERY_S / 2
        await received.settle()  # asked just now: nothing more said
        assert asked == [front_wire.FRESH]
        now[0] += front_wire.ASK_EVERY_S
        await received.settle()  # still read: keep feeding, no wait
        assert asked == [front_wire.FRESH, front_wire.WANT]
        # After a quiet spell the parent is asked again; with no frame coming the wait ends
        # at FRESH_WAIT_S and the last facts answer.
        now[0] += front_wire.QUIET_S + 1
        waiting = asyncio.create_task(received.settle())
        await asyncio.sleep(0.05)
        assert asked[-1] == front_wire.FRESH and not waiting.done()
        now[0] += front_wire.FRESH_WAIT_S + 0.1
        await asyncio.wait_for(waiting, 1)
        assert received.version() == 1

    asyncio.run(main())
