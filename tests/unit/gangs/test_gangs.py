"""Which gang a pod belongs to: the pod conventions of docs/design.md."""

from __future__ import annotations

import pytest
from gang_lookups import NOBODY, Owners, job

from builders import make_pod
from fabricsched import gangs

JOB = Owners.of_job(job("b", "uid-b", parallelism=4, completions=6))


def test_an_indexed_job_pod_is_keyed_by_job_uid_and_ranked_by_completion_index() -> None:
    pod = make_pod("b-2", "train").job("b", "uid-b", 2).gpus(8).usage()
    found = gangs.identify(pod, JOB)
    assert isinstance(found, gangs.GangIdentity)
    assert (found.key, found.name, found.rank, found.size, found.gpus_per_pod) == (
        "train/b@uid-b",
        "b",
        2,
        4,
        8,
    )
    assert (found.tier, found.required) == (None, False)


@pytest.mark.parametrize(
    ("parallelism", "completions", "size"),
    [(4, 6, 4), (8, 2, 2), (3, None, 3)],
    ids=["parallelism below completions", "completions below parallelism", "work queue job uses parallelism"],
)
def test_gang_size_is_the_smaller_of_parallelism_and_completions(
    parallelism: int, completions: int | None, size: int
) -> None:
    pod = make_pod("b-0", "train").job("b", "uid-b", 0).gpus(8).usage()
    found = gangs.identify(pod, Owners.of_job(job("b", "uid-b", parallelism, completions)))
    assert isinstance(found, gangs.GangIdentity) and found.size == size


def test_gang_label_size_annotation_and_rank_annotation_win() -> None:
    pod = (
        make_pod("w-1", "train")
        .job("w", "uid-w")
        .gang("llm", size=3)
        .annotate("fabricsched.io/rank", "1")
        .gpus(4)
        .usage()
    )
    found = gangs.identify(pod, JOB)
    assert isinstance(found, gangs.GangIdentity)
    assert (found.key, found.name, found.size, found.rank, found.job_name) == (
        "train/llm@uid-w",
        "llm",
        3,
        1,
        "w",
    )


def test_completion_index_annotation_counts_when_the_label_is_missing() -> None:
    pod = make_pod("b-3", "train").job("b", "uid-b").annotate(gangs.COMPLETION_INDEX, "3").gpus(8).usage()
    found = gangs.identify(pod, JOB)
    assert isinstance(found, gangs.GangIdentity) and found.rank == 3


@pytest.mark.parametrize(
    ("annotation", "tier", "required"),
    [("fabricsched.io/required-tier", "spine", True), ("fabricsched.io/preferred-tier", "spine", False)],
    ids=["required tier is hard", "preferred tier is soft"],
)
def test_tier_constraint_comes_from_annotations(annotation: str, tier: str, required: bool) -> None:
    pod = make_pod("b-0", "train").job("b", "uid-b", 0).annotate(annotation, tier).gpus(8).usage()
    found = gangs.identify(pod, JOB)
    assert isinstance(found, gangs.GangIdentity) and (found.tier, found.required) == (tier, required)


def test_a_pod_without_a_gpu_request_is_not_ours() -> None:
    pod = make_pod("web", "train").job("b", "uid-b", 0).usage()
    assert isinstance(gangs.identify(pod, JOB), gangs.NotOurs)


def test_a_gpu_limit_alone_counts_as_a_request() -> None:
    pod = make_pod("solo").gpus(2, limit_only=True).usage()
    found = gangs.identify(pod, NOBODY)
    assert isinstance(found, gangs.GangIdentity) and found.gpus_per_pod == 2


def test_a_lone_gpu_pod_is_a_gang_of_one_keyed_by_its_own_uid() -> None:
    pod = make_pod("solo", "dev").gpus(1).usage()
    found = gangs.identify(pod, NOBODY)
    assert isinstance(found, gangs.GangIdentity)
    assert (found.key, found.size, found.rank) == ("dev/solo@uid-dev-solo", 1, None)


def test_a_pod_whose_job_is_not_known_yet_is_unresolved() -> None:
    pod = make_pod("b-0", "train").job("b", "uid-b", 0).gpus(8).usage()
    found = gangs.identify(pod, NOBODY)
    assert isinstance(found, gangs.Unsized) and found.missing == "Job train/b"


def test_facts_of_an_older_job_with_the_same_name_are_not_used() -> None:
    pod = make_pod("b-0", "train").job("b", "uid-new", 0).gpus(8).usage()
    assert isinstance(gangs.identify(pod, Owners.of_job(job("b", "uid-old", 4, 4))), gangs.Unsized)


@pytest.mark.parametrize(
    ("rank", "size_annotation"),
    [("x", "4"), ("4", "4")],
    ids=["rank is not a number", "rank beyond gang size"],
)
def test_a_bad_rank_is_unresolved(rank: str, size_annotation: str) -> None:
    pod = (
        make_pod("g-0", "train")
        .gang("g", int(size_annotation))
        .annotate("fabricsched.io/rank", rank)
        .gpus(8)
        .usage()
    )
    assert isinstance(gangs.identify(pod, NOBODY), gangs.Unsized)


def test_membership_gives_the_same_key_and_rank_as_identify() -> None:
    for pod in (
        make_pod("b-1", "train").job("b", "uid-b", 1).gpus(8).usage(),
        make_pod("g-0", "train").gang("g", 2).annotate("fabricsched.io/rank", "0").gpus(8).usage(),
        make_pod("solo").gpus(1).usage(),
    ):
        found = gangs.identify(pod, JOB)
        assert isinstance(found, gangs.GangIdentity)
        assert gangs.membership(pod, NOBODY) == (found.key, found.rank)
