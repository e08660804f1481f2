"""``JobInfo.pods``: the one rule for a Job's gang size."""

from __future__ import annotations

from typing import Any

import pytest

from fabricsched.ports import jobs


@pytest.mark.parametrize(
    ("spec", "pods"),
    [
        pytest.param({"parallelism": 4, "completions": 4}, 4, id="indexed: all at once"),
        pytest.param({"parallelism": 8, "completions": 3}, 3, id="fewer completions than parallelism"),
        pytest.param({"parallelism": 2, "completions": 6}, 2, id="waves of parallelism"),
        pytest.param({"parallelism": 5}, 5, id="work queue: parallelism alone"),
        pytest.param({"completions": 3}, 1, id="unset parallelism is Kubernetes' 1"),
    ],
)
def test_a_jobs_gang_size_is_the_pods_it_runs_at_once(spec: dict[str, Any], pods: int) -> None:
    job = jobs.JobInfo.from_manifest({"metadata": {"name": "j", "namespace": "train"}, "spec": spec})
    assert job.pods == pods == jobs.pods_at_once(job.parallelism, job.completions)
