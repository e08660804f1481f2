"""Gang metadata is user text: a bad value on one pod is that pod's reason, and nothing else's."""

from __future__ import annotations

import time

import pytest
from gang_lookups import NOBODY, Owners, job

from builders import make_pod
from fabricsched import gangs
from fabricsched.gangs import identity

BAD_NUMBERS = ["²", "٣", "\uff11", "-1", "+1", "1e3", "1_0", "0x1", "1.0", "", "9" * 256 * 1024]
BAD_IDS = ["superscript two", "arabic-indic three", "fullwidth one", "negative", "plus sign", "exponent",
           "underscore", "hex", "fraction", "empty", "256 KB of nines"]


@pytest.mark.parametrize("rank", BAD_NUMBERS, ids=BAD_IDS)
def test_a_bad_rank_annotation_is_that_pods_short_reason(rank: str) -> None:
    pod = make_pod("g-0", "train").gang("g", 4).annotate(gangs.RANK_ANNOTATION, rank).gpus(8).usage()
    found = gangs.identify(pod, NOBODY)
    assert isinstance(found, gangs.Unsized)
    assert gangs.RANK_ANNOTATION in found.reason
    assert len(found.reason) < 120 and found.reason.isascii()


@pytest.mark.parametrize("index", ["²", "٣", "-1", "9" * 1000],
                         ids=["superscript", "arabic-indic", "negative", "a thousand nines"])
def test_a_bad_completion_index_label_is_that_pods_reason(index: str) -> None:
    pod = make_pod("b-0", "train").job("b", "uid-b").label(gangs.COMPLETION_INDEX, index).gpus(8).usage()
    found = gangs.identify(pod, Owners.of_job(job("b", "uid-b", 4, 4)))
    assert isinstance(found, gangs.Unsized) and gangs.COMPLETION_INDEX in found.reason


@pytest.mark.parametrize("size", [*BAD_NUMBERS, "0", str(gangs.MAX_GANG_SIZE + 1)],
                         ids=[*BAD_IDS, "zero", "above the limit"])
def test_a_bad_gang_size_is_that_pods_short_reason(size: str) -> None:
    pod = make_pod("g-0", "train").label(gangs.GANG_LABEL, "g").annotate(gangs.GANG_SIZE_ANNOTATION, size)
    found = gangs.identify(pod.gpus(8).usage(), NOBODY)
    assert isinstance(found, gangs.Unsized)
    assert gangs.GANG_SIZE_ANNOTATION in found.reason and len(found.reason) < 120


def test_the_largest_gang_size_and_rank_are_accepted() -> None:
    size = str(gangs.MAX_GANG_SIZE)
    pod = make_pod("g-0", "train").gang("g").annotate(gangs.GANG_SIZE_ANNOTATION, size)
    pod = pod.annotate(gangs.RANK_ANNOTATION, str(gangs.MAX_GANG_SIZE - 1)).gpus(8)
    found = gangs.identify(pod.usage(), NOBODY)
    assert isinstance(found, gangs.GangIdentity)
    assert (found.size, found.rank) == (gangs.MAX_GANG_SIZE, gangs.MAX_GANG_SIZE - 1)


@pytest.mark.parametrize("rank", BAD_NUMBERS, ids=BAD_IDS)
def test_membership_never_raises_a_bad_rank_is_no_rank(rank: str) -> None:
    pod = make_pod("g-0", "train").gang("g", 4).annotate(gangs.RANK_ANNOTATION, rank).gpus(8).usage()
    assert gangs.membership(pod, NOBODY) == ("train/g", None)


def test_a_256_kb_annotation_is_read_in_bounded_time() -> None:
    text = "²" * 256 * 1024
    pod = (make_pod("g-0", "train").gang("g").annotate(gangs.GANG_SIZE_ANNOTATION, text)
           .annotate(gangs.RANK_ANNOTATION, text).gpus(8).usage())
    started = time.perf_counter()
    for _ in range(1000):
        gangs.identify(pod, NOBODY)
        gangs.membership(pod, NOBODY)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("tier", ["x" * (identity.MAX_TIER_NAME + 1), "x" * 100 * 1024, "leaf\n", "lèaf"],
                         ids=["one over the limit", "100 KB", "a newline", "not ASCII"])
@pytest.mark.parametrize("annotation", [gangs.REQUIRED_TIER_ANNOTATION, gangs.PREFERRED_TIER_ANNOTATION])
def test_a_tier_annotation_that_no_tier_could_have_is_refused_briefly(tier: str, annotation: str) -> None:
    pod = make_pod("b-0", "train").job("b", "uid-b", 0).annotate(annotation, tier).gpus(8).usage()
    found = gangs.identify(pod, Owners.of_job(job("b", "uid-b", 2, 2)))
    assert isinstance(found, gangs.Unsized)
    assert annotation in found.reason and len(found.reason) < 120


def test_a_tier_name_as_long_as_the_crd_allows_is_kept() -> None:
    tier = "t" * identity.MAX_TIER_NAME
    pod = make_pod("b-0", "train").job("b", "uid-b", 0).annotate(gangs.REQUIRED_TIER_ANNOTATION, tier).gpus(8)
    found = gangs.identify(pod.usage(), Owners.of_job(job("b", "uid-b", 2, 2)))
    assert isinstance(found, gangs.GangIdentity) and (found.tier, found.required) == (tier, True)


@pytest.mark.parametrize("uid_label", [None, "uid-b"], ids=["no controller-uid label", "with controller-uid"])
def test_a_job_pod_without_an_owner_reference_gets_one_key_from_identify_and_membership(
    uid_label: str | None,
) -> None:
    """The one key function: identify (with the Job known) and membership (no Job to ask) agree,
    so prioritize, bind tracking and restore find the gang the filter planned."""
    pod = make_pod("b-1", "train").label(identity.JOB_NAME_LABEL, "b").label(gangs.COMPLETION_INDEX, "1")
    if uid_label is not None:
        pod.label(identity.CONTROLLER_UID_LABEL, uid_label)
    usage = pod.gpus(8).usage()
    found = gangs.identify(usage, Owners.of_job(job("b", "uid-b", 2, 2)))
    assert isinstance(found, gangs.GangIdentity)
    assert gangs.membership(usage, NOBODY) == (found.key, 1)
    assert found.key == ("train/b@uid-b" if uid_label else "train/b")
