"""Nothing an outsider sends the webhook is kept (issue 29, the memory hole of kopf's
admission server): 15,000 UPDATE reviews with fresh uids, then 200 with 500 KB uids, posted
straight to the webhook's port over TLS. Every answer is 200 and allowed, and the resident
memory of ``fabricsched run`` and its children stays within 8 MB of where it was after a
warm-up of 500 reviews.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from clusterkit import Cluster
from front_harness import Poster, Served, family, resident_kb, review, serving

pytestmark = pytest.mark.integration

POD = {"metadata": {"name": "w-0"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
FLAT_KB = 8 * 1024
THREADS = 4


@pytest.fixture(scope="module")
def served(cluster: Cluster, repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(cluster, repo_root, tmp_path_factory.mktemp("webhook-memory")) as found:
        yield found


def send(served: Served, count: int, uid_bytes: int = 0) -> list[tuple[int, bool]]:
    def one_thread(n: int) -> list[tuple[int, bool]]:
        poster = Poster(served)
        answers = []
        for _ in range(n):
            uid = uuid.uuid4().hex + "x" * max(0, uid_bytes - 32)
            status, response = poster.post(review(uid, "UPDATE", POD))
            answers.append((status, bool(response and response["allowed"] and response["uid"] == uid
                                         and "patch" not in response)))
        poster.close()
        return answers

    shares = [count // THREADS + (1 if i < count % THREADS else 0) for i in range(THREADS)]
    with ThreadPoolExecutor(THREADS) as pool:
        return [a for part in pool.map(one_thread, shares) for a in part]


def test_update_reviews_with_fresh_and_huge_uids_are_answered_and_leave_nothing_behind(
        served: Served) -> None:
    assert len(family(served.process.pid)) >= 2  # the front process is counted
    warm = send(served, 500) + send(served, 20, uid_bytes=500_000)
    assert all(a == (200, True) for a in warm)
    before = resident_kb(served.process.pid)
    answers = send(served, 15_000)
    after_fresh = resident_kb(served.process.pid)
    huge = send(served, 200, uid_bytes=500_000)
    after_huge = resident_kb(served.process.pid)
    print(f"resident KiB: {before} after warm-up, {after_fresh} after 15,000 fresh uids "
          f"({after_fresh - before:+}), {after_huge} after 200 uids of 500 KB ({after_huge - before:+})")
    assert sum(a == (200, True) for a in answers) == 15_000
    assert all(a == (200, True) for a in huge)
    assert after_fresh - before <= FLAT_KB
    assert after_huge - before <= FLAT_KB
