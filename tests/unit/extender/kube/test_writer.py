"""FabricPlacement objects: book entries round-trip through the CRD models; writes retry."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import pytest
from extender_harness import MemoryStore

from fabricsched import ids
from fabricsched.api import placement as api
from fabricsched.controller import state as cluster_state
from fabricsched.extender.book import following, objects, reservations
from fabricsched.extender.kube import writer as placements
from fabricsched.ports import errors

N = ids.NodeName


def entry(**changes: object) -> reservations.Entry:
    base = reservations.Entry(
        key=ids.GangKey("train/b@1f0c"),
        namespace="train",
        name="b",
        job_uid="1f0c",
        job_name="b",
        size=3,
        gpus_per_pod=8,
        topology=ids.TopologyName("ib-east"),
        tier="leaf",
        required=True,
        ranks=(N("gpu-017"), N("gpu-018"), None),
        bound={0: N("gpu-017")},
        expires_at=1_700_000_120.0,
        phase=api.PlacementPhase.EXPIRED,
        domains={"leaf": (ids.DomainName("l03"),), "spine": (ids.DomainName("s1"),)},
        comm_slowdown=1.07,
        degraded_path=True,
        reasons=("fits leaf l03",),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_manifest_is_a_valid_fabricplacement_owned_by_the_job() -> None:
    manifest = objects.manifest_of(entry())
    obj = api.FabricPlacement.model_validate(manifest)
    assert obj.metadata["ownerReferences"][0]["uid"] == "1f0c"
    assert [(r.rank, r.node) for r in obj.spec.ranks] == [(0, "gpu-017"), (1, "gpu-018")]
    assert obj.status is not None and obj.status.bound_ranks == [0] and obj.status.degraded_path
    assert obj.spec.tier.required == "leaf" and obj.spec.tier.name is None


def test_an_entry_read_back_from_its_object_holds_the_same_plan() -> None:
    original = entry(phase=api.PlacementPhase.RESERVED)
    back = objects.entry_of(objects.manifest_of(original))
    assert back is not None
    # Bound ranks are re-derived from pods after a restart, not trusted from status.
    assert back == dataclasses.replace(original, bound={})


def test_an_unreadable_object_raises_a_typed_error_naming_it() -> None:
    manifest = objects.manifest_of(entry())
    manifest["spec"]["ranks"].append({"rank": 7, "node": "x"})
    with pytest.raises(objects.Unreadable, match="FabricPlacement b"):
        objects.entry_of(manifest)


def test_an_unreadable_expiry_is_unreadable_too() -> None:
    manifest = objects.manifest_of(entry(phase=api.PlacementPhase.RESERVED))
    manifest["status"]["expiresAt"] = "yesterday"
    with pytest.raises(objects.Unreadable):
        objects.entry_of(manifest)


def test_only_the_newest_entry_of_a_gang_is_written_and_failures_are_retried() -> None:
    store = MemoryStore()
    writer = placements.PlacementWriter(store)

    async def scenario() -> None:
        store.fail = True
        writer.submit(entry(reasons=("first",)))
        assert not await writer.save_now(ids.GangKey("train/b@1f0c"), 1.0)
        writer.submit(entry(reasons=("second",)))
        store.fail = False
        task = asyncio.create_task(writer.run())
        for _ in range(100):
            if not writer.pending:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    assert store.writes == 1 and store.get("train", "b")["status"]["reasons"] == ["second"]
    assert writer.failures == 1


def test_save_soon_creates_without_waiting_and_flush_lets_it_land_first() -> None:
    store = MemoryStore()
    writer = placements.PlacementWriter(store)
    fresh = entry(phase=api.PlacementPhase.RESERVED, bound={})

    async def scenario() -> None:
        writer.submit(fresh)
        writer.save_soon(fresh.key, 1.0)
        assert store.objects == {}  # nothing written before the caller yields
        await writer.flush(1.0)
        assert store.get("train", "b")["status"]["phase"] == "Reserved" and writer.pending == 0

    asyncio.run(scenario())


def test_a_new_plan_is_created_at_once_and_its_status_follows_in_the_background() -> None:
    store = MemoryStore()
    writer = placements.PlacementWriter(store)
    fresh = entry(phase=api.PlacementPhase.RESERVED, bound={})

    async def scenario() -> None:
        writer.submit(fresh)
        assert await writer.save_now(fresh.key, 1.0)
        assert "status" not in store.get("train", "b") and writer.pending == 1
        task = asyncio.create_task(writer.run())
        for _ in range(200):
            if not writer.pending:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    assert store.get("train", "b")["status"]["phase"] == "Reserved"


def gang(name: str, namespace: str = "train") -> reservations.Entry:
    """A gang named by its label (no Job), as ``fabricsched.io/gang: <name>`` gives it."""
    return entry(key=ids.gang_key(namespace, name), name=name, job_uid="", job_name=None)


NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize("name", ["b", "llama-70b", "train.v2", "a" * 253],
                         ids=["a short name", "a name with dashes", "a name with a dot", "the longest name"])
def test_a_gang_name_that_is_a_valid_object_name_is_the_objects_name(name: str) -> None:
    assert objects.object_name(gang(name)) == name


def test_a_gang_name_with_an_underscore_gets_a_valid_name_and_keeps_its_own_in_the_spec() -> None:
    manifest = objects.manifest_of(gang("llama_70b"))
    name = manifest["metadata"]["name"]
    assert re.fullmatch(r"llama-70b-[0-9a-f]{8}", name) and NAME.fullmatch(name)
    assert manifest["spec"]["gang"] == "llama_70b"
    assert objects.entry_of(manifest).name == "llama_70b"


def test_gangs_that_differ_only_in_case_get_two_objects() -> None:
    upper, lower = objects.object_name(gang("Dup")), objects.object_name(gang("dup"))
    assert lower == "dup" and upper != lower and upper.startswith("dup-")


@pytest.mark.parametrize("name", ["_", "-x-", "x" * 300, "Ünïcode", "a..b", "UPPER.case"],
                         ids=["only a symbol", "dashes at both ends", "longer than an object name",
                              "non-ASCII letters", "an empty dot segment", "upper case with a dot"])
def test_every_other_gang_name_becomes_a_valid_object_name(name: str) -> None:
    made = objects.object_name(gang(name))
    assert NAME.fullmatch(made) and len(made) <= 253, made


def test_the_same_name_in_two_namespaces_hashes_apart_but_each_is_stable() -> None:
    first, second = gang("Dup", "team-a"), gang("Dup", "team-b")
    assert objects.object_name(first) != objects.object_name(second)
    assert objects.object_name(first) == objects.object_name(gang("Dup", "team-a"))


class GoneNamespaceStore(MemoryStore):
    """Every write fails as the API server answers for a namespace that is gone or going."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.attempts = 0

    async def create(self, manifest: dict[str, object]) -> None:
        self.attempts += 1
        raise self.error

    async def save(self, manifest: dict[str, object]) -> None:
        self.attempts += 1
        raise self.error


NAMESPACE_GONE = {
    "a deleted namespace (404)": errors.NotFound(
        '404 Not Found: {"kind":"Status","message":"namespaces \\"train\\" not found","code":404}', 404),
    "a terminating namespace (403)": errors.Forbidden(
        "403 Forbidden: fabricplacements.fabricsched.io \"b\" is forbidden: unable to create new content "
        "in namespace train because it is being terminated", 403),
}


@pytest.mark.parametrize("error", NAMESPACE_GONE.values(), ids=NAMESPACE_GONE.keys())
def test_a_write_into_a_namespace_that_is_gone_is_dropped_and_its_plan_released(error: Exception) -> None:
    store = GoneNamespaceStore(error)
    book = reservations.Book(reservations.BookOptions())
    writer = placements.PlacementWriter(store)
    now = 1_700_000_000.0
    fresh = book.reserve(entry(phase=api.PlacementPhase.RESERVED, bound={}), now)
    assert book.reserved_gpus()

    async def scenario() -> None:
        writer.submit(fresh)
        assert not await writer.save_now(fresh.key, 1.0)
        writer.submit(fresh)  # a later change of the same gang: dropped as well, not retried
        task = asyncio.create_task(writer.run())
        await asyncio.sleep(placements.COALESCE_S + placements.RETRY_DELAY_S * 2)
        task.cancel()

    asyncio.run(scenario())
    assert store.attempts == 2 and not writer.pending and writer.dropped == 2
    # The writer reports the gang; the follower's next tick releases its plan and its GPUs.
    follower = following.Follower(
        cluster_state.ClusterState(lambda: now), book, writer, lambda: now,
        key=lambda pod: ids.GangKey(pod.uid), rank=lambda pod, resource: None,
    )
    follower.housekeeping()
    assert book.get(fresh.key) is None and not book.reserved_gpus()
    assert writer.take_gone() == []  # reported once


@pytest.mark.parametrize("message, gone", [
    ('404 Not Found: namespaces "train" not found', True),
    ("404 Not Found: the server could not find the requested resource", False),
    ('404 Not Found: fabricplacements.fabricsched.io "b" not found', False),
    ("403 Forbidden: fabricplacements is forbidden: User cannot create", False),
], ids=["a missing namespace", "a missing CRD", "a missing object", "a missing grant"])
def test_only_a_missing_or_terminating_namespace_counts_as_gone(message: str, gone: bool) -> None:
    kind = errors.NotFound if message.startswith("404") else errors.Forbidden
    assert placements.namespace_gone(kind(message)) is gone
