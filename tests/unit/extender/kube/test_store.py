"""The API adapters' failures: what the client raises leaves them as ``ports.errors`` types.

The client's HTTP layer is replaced by a fake ``CustomObjectsApi`` / ``BatchV1Api`` that
answers from a dict or raises the client's own ``ApiException``; the adapters' logic (stale
memory -> read and write again, 404 -> gone) runs as written.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import exceptions

from fabricsched.extender.kube import store as kubeapi
from fabricsched.ports import errors

MANIFEST: dict[str, Any] = {
    "apiVersion": "fabricsched.io/v1alpha1", "kind": "FabricPlacement",
    "metadata": {"name": "a", "namespace": "train"},
    "spec": {"gang": "a", "size": 1}, "status": {"phase": "Reserved"},
}


class FakeObjects:
    """Just the calls the store makes; ``fail`` maps a method name to the status it raises."""

    def __init__(self, fail: dict[str, int] | None = None) -> None:
        self.fail = fail or {}
        self.calls: list[str] = []

    def _answer(self, name: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append(name)
        if name in self.fail:
            raise exceptions.ApiException(status=self.fail.pop(name), reason="Because")
        return {**(body or MANIFEST), "metadata": {**MANIFEST["metadata"], "resourceVersion": "1"}}

    def create_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        return self._answer("create", {k: v for k, v in args[-1].items() if k != "status"})

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        # What a recreated Job's gang left: another plan under the same name.
        older = {**MANIFEST, "spec": {"gang": "a", "size": 2}, "status": {"phase": "Bound"}}
        return self._answer("get", older)

    def replace_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        return self._answer("replace", args[-1])

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._answer("patch-status")

    def list_cluster_custom_object(self, *args: Any) -> dict[str, Any]:
        self.calls.append("list")
        return {"metadata": {"resourceVersion": "12"}, "items": [MANIFEST]}


def store(fake: FakeObjects) -> kubeapi.ApiPlacementStore:
    made = kubeapi.ApiPlacementStore(client.ApiClient())
    made._api = fake  # type: ignore[assignment]
    return made


def test_a_create_that_conflicts_is_read_back_and_replaced_with_the_new_plan() -> None:
    fake = FakeObjects({"create": 409})
    asyncio.run(store(fake).save(MANIFEST))
    assert fake.calls == ["create", "get", "replace", "patch-status"]


@pytest.mark.parametrize(("status", "kind"), [
    (500, errors.Unavailable), (403, errors.Forbidden), (422, errors.Rejected),
], ids=["a server error is worth a retry", "a refusal of access is not", "an invalid object is rejected"])
def test_a_failed_write_leaves_as_a_typed_error(status: int, kind: type[errors.ApiError]) -> None:
    with pytest.raises(kind) as raised:
        asyncio.run(store(FakeObjects({"create": status})).save(MANIFEST))
    assert isinstance(raised.value.__cause__, exceptions.ApiException)


def test_a_load_keeps_the_version_it_listed_at_for_the_watch_to_start_from() -> None:
    made = store(FakeObjects())
    assert made.listed_version is None
    assert asyncio.run(made.load()) == [MANIFEST]
    assert made.listed_version == "12"


class FakeJobs:
    def __init__(self, status: int | None = None, job: client.V1Job | None = None) -> None:
        self.status, self.job = status, job
        self.api_client = client.ApiClient()

    def read_namespaced_job(self, name: str, namespace: str) -> client.V1Job:
        if self.status is not None:
            raise exceptions.ApiException(status=self.status, reason="Because")
        assert self.job is not None
        return self.job


def fetcher(fake: FakeJobs) -> kubeapi.ApiJobFetcher:
    made = kubeapi.ApiJobFetcher(client.ApiClient())
    made._api = fake  # type: ignore[assignment]
    return made


def test_a_job_read_from_the_api_is_the_same_jobinfo_the_watch_gives() -> None:
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="j", namespace="train", uid="u1"),
        spec=client.V1JobSpec(parallelism=4, completions=4, completion_mode="Indexed",
                              template=client.V1PodTemplateSpec()),
        status=client.V1JobStatus(conditions=[client.V1JobCondition(type="Complete", status="True")]),
    )
    found = asyncio.run(fetcher(FakeJobs(job=job)).fetch("train", "j"))
    assert found is not None
    assert (found.name, found.uid, found.pods, found.finished) == ("j", "u1", 4, True)


def test_a_missing_job_is_none_and_an_unreachable_api_is_an_error() -> None:
    assert asyncio.run(fetcher(FakeJobs(status=404)).fetch("train", "j")) is None
    with pytest.raises(errors.Unavailable):
        asyncio.run(fetcher(FakeJobs(status=503)).fetch("train", "j"))


PLAN = {**MANIFEST, "spec": {"gang": "a", "jobUID": "u1", "size": 1, "ranks": [{"rank": 0, "node": "n1"}]}}


class FakeObjectsHolding(FakeObjects):
    """An object of the same name exists: ``held`` is what a read returns."""

    def __init__(self, held: dict[str, Any], fail: dict[str, int] | None = None) -> None:
        super().__init__(fail)
        self.held = held

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        return self._answer("get", self.held)


def test_a_new_plan_meeting_another_replicas_live_plan_of_the_gang_is_refused() -> None:
    theirs = {**PLAN, "spec": {**PLAN["spec"], "ranks": [{"rank": 0, "node": "n2"}]},
              "status": {"phase": "Bound"}}
    fake = FakeObjectsHolding(theirs, {"create": 409})
    with pytest.raises(errors.Conflict, match="live plan"):
        asyncio.run(store(fake).create(PLAN))
    assert fake.calls == ["create", "get"]


def test_a_create_whose_answer_was_lost_is_our_own_object_and_passes() -> None:
    fake = FakeObjectsHolding({k: v for k, v in PLAN.items() if k != "status"}, {"create": 409})
    asyncio.run(store(fake).create(PLAN))
    assert fake.calls == ["create", "get"]


def test_releasing_a_plan_whose_object_is_gone_creates_nothing() -> None:
    fake = FakeObjects({"get": 404})
    released = {**PLAN, "metadata": {**PLAN["metadata"], "ownerReferences": [{"kind": "Job", "uid": "u1"}]},
                "status": {"phase": "Released"}}
    made = store(fake)
    made._known[("train", "a")] = {**PLAN, "metadata": {**PLAN["metadata"], "resourceVersion": "0"}}
    fake.fail["replace"] = 404
    asyncio.run(made.save(released))
    assert "create" not in fake.calls


def test_an_object_read_back_at_an_older_generation_never_uncovers_a_newer_own_write() -> None:
    made = store(FakeObjects())
    made._remember(("train", "a"), {"metadata": {"generation": 3}})
    made._remember(("train", "a"), {"metadata": {"generation": 1}})  # a read of an older version
    assert made.covers("train", "a", 3)
    assert not made.covers("train", "a", 4)
