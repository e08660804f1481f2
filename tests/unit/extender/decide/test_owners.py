"""The owner cache: one GET per owner, bounded waits, refresh, retry and a size bound."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from extender_harness import Harness, fabric_nodes
from owner_objects import jobset, jobset_pod

from fabricsched import gangs, parsing
from fabricsched.extender.decide import owners
from fabricsched.ports import errors
from timing import Clock


class SlowOwners:
    """Answers after ``delay`` seconds of event-loop time; ``fail`` raises an API error."""

    def __init__(self, delay: float = 0.0) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.delay = delay
        self.reads: list[tuple[str, str, str]] = []
        self.fail = False

    async def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads.append((kind, namespace, name))
        await asyncio.sleep(self.delay)
        if self.fail:
            raise errors.Unavailable("API server away")
        return self.objects.get((kind, namespace, name))


def cache(fetcher: SlowOwners, **options: Any) -> tuple[owners.OwnerCache, Clock]:
    harness = Harness(fabric_nodes())
    clock = Clock()
    return owners.OwnerCache(harness.state, fetcher, None, clock, owners.CacheOptions(**options)), clock


def pod() -> Any:
    return jobset_pod("llm", "uid-js", 0, 0).usage()


def test_a_slow_read_is_waited_for_at_most_the_timeout_and_lands_for_the_next_call() -> None:
    fetcher = SlowOwners(delay=0.3)
    fetcher.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js")
    owner_cache, _ = cache(fetcher, fetch_timeout_s=0.05)

    async def scenario() -> tuple[object, object]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await owner_cache.prepare(pod())
        waited = loop.time() - started
        assert waited < 0.2, waited
        first = owner_cache.view().jobset("train", "llm")
        await asyncio.sleep(0.4)  # the read goes on in the background
        await owner_cache.prepare(pod())
        return first, owner_cache.view().jobset("train", "llm")

    first, later = asyncio.run(scenario())
    assert first is None and isinstance(later, gangs.JobSetFacts)
    assert fetcher.reads == [("JobSet", "train", "llm")]


def test_a_missing_owner_is_asked_again_only_after_the_retry_interval() -> None:
    fetcher = SlowOwners()
    owner_cache, clock = cache(fetcher, retry_s=2.0)
    asyncio.run(owner_cache.prepare(pod()))
    with pytest.raises(parsing.Invalid, match="does not exist"):
        owner_cache.view().jobset("train", "llm")
    asyncio.run(owner_cache.prepare(pod()))
    assert len(fetcher.reads) == 1
    clock.advance(2.0)
    fetcher.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js")
    asyncio.run(owner_cache.prepare(pod()))
    assert len(fetcher.reads) == 2 and owner_cache.view().jobset("train", "llm") is not None


def test_a_failed_refresh_keeps_what_was_read_before() -> None:
    fetcher = SlowOwners()
    fetcher.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js")
    owner_cache, clock = cache(fetcher, refresh_s=30.0)
    asyncio.run(owner_cache.prepare(pod()))
    clock.advance(31)
    fetcher.fail = True
    asyncio.run(owner_cache.prepare(pod()))
    assert len(fetcher.reads) == 2 and owner_cache.view().jobset("train", "llm") is not None


def test_a_pod_naming_another_uid_reads_the_recreated_owner() -> None:
    fetcher = SlowOwners()
    fetcher.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-old")
    owner_cache, clock = cache(fetcher)
    asyncio.run(owner_cache.prepare(pod()))
    fetcher.objects[("JobSet", "train", "llm")] = jobset("llm", "uid-js")
    clock.advance(1.0)
    asyncio.run(owner_cache.prepare(pod()))
    facts = owner_cache.view().jobset("train", "llm")
    assert facts is not None and facts.uid == "uid-js" and len(fetcher.reads) == 2


def test_the_cache_keeps_at_most_max_owners() -> None:
    fetcher = SlowOwners()
    owner_cache, _ = cache(fetcher, max_owners=3)
    for i in range(5):
        fetcher.objects[("JobSet", "train", f"js{i}")] = jobset(f"js{i}", f"uid-{i}")
        asyncio.run(owner_cache.prepare(jobset_pod(f"js{i}", f"uid-{i}", 0, 0).usage()))
    view = owner_cache.view()
    assert [view.jobset("train", f"js{i}") is not None for i in range(5)] == [False, False, True, True, True]
