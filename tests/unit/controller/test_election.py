"""Leader election: the pure round decision, and two electors racing over one Lease.

The Lease API is a small in-memory stand-in with the API server's optimistic concurrency: a
write must carry the resourceVersion it read, else 409 (what keeps two replicas from both
winning).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import exceptions

from fabricsched.controller import election
from fabricsched.ports import errors

ME, OTHER = "pod-a_1", "pod-b_2"


def record(holder: str, duration: float = 15) -> election.Record:
    return election.Record(holder=holder, duration_s=duration, transitions=0, version="1", renewed="t")


@pytest.mark.parametrize(("lease", "silent_for", "action"), [
    (None, 0.0, election.Action.CREATE),
    (record(ME), 100.0, election.Action.RENEW),
    (record(""), 0.0, election.Action.TAKE),
    (record(OTHER), 14.9, election.Action.WAIT),
    (record(OTHER), 15.0, election.Action.TAKE),
], ids=["no Lease yet: create it", "ours: renew it however long ago", "given up: take it at once",
        "another's, renewed within its duration: wait", "another's, silent for its duration: take it"])
def test_a_round_decides(lease: election.Record | None, silent_for: float, action: election.Action) -> None:
    assert election.decide(lease, ME, silent_for) is action


@pytest.mark.parametrize("timings", [(2, 10, 10), (0, 10, 15), (10, 2, 15)],
                         ids=["renew deadline not below the lease", "no retry period",
                              "retry above the renew deadline"])
def test_inconsistent_timings_are_refused(timings: tuple[float, float, float]) -> None:
    retry, deadline, lease = timings
    with pytest.raises(ValueError, match="retry < renew deadline < lease"):
        election.ElectionOptions("ns", "fabricsched", ME, lease_s=lease, renew_deadline_s=deadline,
                                 retry_s=retry)


class FakeLeases:
    """One namespace's Leases, with resourceVersion checks; ``down`` makes every call fail."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.versions = itertools.count(1)
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise exceptions.ApiException(status=503, reason="Unavailable")

    def _stored(self, body: dict[str, Any]) -> client.V1Lease:
        body["metadata"]["resourceVersion"] = str(next(self.versions))
        self.leases[body["metadata"]["name"]] = body
        return self._typed(body)

    @staticmethod
    def _typed(body: dict[str, Any]) -> client.V1Lease:
        spec = body["spec"]
        return client.V1Lease(
            metadata=client.V1ObjectMeta(name=body["metadata"]["name"],
                                         resource_version=body["metadata"]["resourceVersion"]),
            spec=client.V1LeaseSpec(holder_identity=spec.get("holderIdentity"),
                                    lease_duration_seconds=spec.get("leaseDurationSeconds"),
                                    lease_transitions=spec.get("leaseTransitions"),
                                    renew_time=spec.get("renewTime"), acquire_time=spec.get("acquireTime")))

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> client.V1Lease:
        self._check()
        if name not in self.leases:
            raise exceptions.ApiException(status=404, reason="NotFound")
        return self._typed(self.leases[name])

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **_: Any) -> client.V1Lease:
        self._check()
        if body["metadata"]["name"] in self.leases:
            raise exceptions.ApiException(status=409, reason="AlreadyExists")
        return self._stored(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any],
                                 **_: Any) -> client.V1Lease:
        self._check()
        if self.leases[name]["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise exceptions.ApiException(status=409, reason="Conflict")
        return self._stored(body)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(fake: FakeLeases, identity: str, clock: Clock) -> election.LeaseElector:
    made = election.LeaseElector(client.ApiClient(), election.ElectionOptions("ns", "fabricsched", identity),
                                 monotonic=clock)
    made._api = fake  # type: ignore[assignment]
    return made


def test_of_two_replicas_one_leads_and_the_other_takes_over_once_the_lease_is_silent() -> None:
    fake, clock = FakeLeases(), Clock()
    a, b = elector(fake, ME, clock), elector(fake, OTHER, clock)
    a._round()
    b._round()
    assert a.leading() and not b.leading()
    assert fake.leases["fabricsched"]["spec"]["holderIdentity"] == ME
    # a stops renewing (killed): b waits the lease duration out on its own clock, then takes it.
    for _ in range(7):
        clock.now += 2
        b._round()
    assert not b.leading()
    clock.now += 2
    b._round()
    assert b.leading() and not a.leading()
    assert fake.leases["fabricsched"]["spec"]["holderIdentity"] == OTHER
    assert fake.leases["fabricsched"]["spec"]["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_stops_leading_before_anyone_may_take_over() -> None:
    fake, clock = FakeLeases(), Clock()
    a = elector(fake, ME, clock)
    a._round()
    fake.down = True
    clock.now += 9.9
    assert a.leading()
    clock.now += 0.2  # past the 10 s renew deadline, still inside the 15 s lease
    assert not a.leading()


def test_two_replicas_racing_for_a_free_lease_never_both_win() -> None:
    fake, clock = FakeLeases(), Clock()
    a, b = elector(fake, ME, clock), elector(fake, OTHER, clock)
    a._round()
    fake.leases["fabricsched"]["spec"]["holderIdentity"] = ""  # a gave it up
    read_by_a = fake.read_namespaced_lease("fabricsched", "ns")
    b._round()  # b takes the free Lease first ...
    with pytest.raises(errors.Conflict):
        # ... so a's write with the version it read before is refused.
        a._write(read_by_a, election._record(read_by_a), taking=True)
    assert fake.leases["fabricsched"]["spec"]["holderIdentity"] == OTHER


def test_cancelling_the_leader_gives_the_lease_up() -> None:
    fake, clock = FakeLeases(), Clock()
    a = elector(fake, ME, clock)

    async def run_briefly() -> None:
        task = asyncio.create_task(a.run())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run_briefly())
    assert not fake.leases["fabricsched"]["spec"].get("holderIdentity")
    b = elector(fake, OTHER, clock)
    b._round()
    assert b.leading()
