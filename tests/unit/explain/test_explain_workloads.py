from __future__ import annotations

import explain_objects as o
import pytest

from fabricsched.explain import workloads


@pytest.mark.parametrize(
    ("kind", "name", "uid", "gang", "expected"),
    [
        ("Job", "a", "job-uid", "other", True),
        ("JobSet", "js", "job-uid", "js", True),
        ("JobSet", "js", "nope", "js", True),
        ("PyTorchJob", "pt", "nope", "pt-2", False),
        ("LeaderWorkerSet", "lws", "nope", "lws-2", True),
        ("LeaderWorkerSet", "lws", "nope", "lws-x", False),
    ],
    ids=[
        "by owner uid",
        "by jobUID",
        "by gang name",
        "no suffix match outside LWS",
        "LWS group",
        "LWS bad suffix",
    ],
)
def test_placements_belong_to_their_workload(
    kind: str, name: str, uid: str, gang: str, expected: bool
) -> None:
    placement = o.placement("x", ["h1"])
    placement["spec"]["gang"] = gang
    if uid == "nope":
        placement["metadata"]["ownerReferences"] = []
    assert workloads.belongs_to(placement, kind, name, uid) is expected


def test_the_owner_reference_names_the_workload() -> None:
    owner = workloads.owner_of(o.placement("a", ["h1"]))
    assert owner is not None and owner[0].kind == "Job" and owner[1] == "a"
    assert owner[0].path("train", "a") == "/apis/batch/v1/namespaces/train/jobs/a"
