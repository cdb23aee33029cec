"""Leader election against a fake API server that speaks HTTP to the real client.

Durations are tiny (lease 1 s, renew deadline 0.6 s, retry 0.1 s) and real: the elector's
own clock and sleeps run, and tests wait for observable states with a bounded poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from fakekube import FakeKubeApi, eventually
from kubernetes_asyncio.client import ApiClient
from pydantic import ValidationError

from autoscaler.run.leader import AlwaysLeader, LeaderElector, make_elector
from autoscaler.settings import Settings

LEASE_NS = "elastic-autoscaler"
LEASE = "elastic-autoscaler"
DURATION, DEADLINE, RETRY = 1.0, 0.6, 0.1


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "lease_name": LEASE,
        "lease_namespace": LEASE_NS,
        "lease_duration_seconds": DURATION,
        "lease_renew_deadline_seconds": DEADLINE,
        "lease_retry_period_seconds": RETRY,
        "kube_request_timeout_seconds": 5,
    }
    base.update(overrides)
    return Settings(**base)


class Candidate:
    """One replica: its own ApiClient (its own connections), elector and change log."""

    def __init__(self, kube: FakeKubeApi, identity: str, **overrides: Any) -> None:
        self.client = ApiClient(kube.configuration())
        self.changes: list[bool] = []
        self.elector = LeaderElector(
            settings(**overrides).leader_options(),
            self.client,
            identity,
            on_change=self.changes.append,
        )
        self.task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    async def lead(self) -> None:
        """Start, and wait until this candidate leads."""
        self.start()
        await eventually(lambda: self.is_leader, within=3, message=f"{self.elector.identity} leads")

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await self.task
        self.task = None

    async def close(self) -> None:
        await self.stop()
        await self.client.close()


@pytest.fixture
async def candidates(kube: FakeKubeApi) -> AsyncIterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(identity: str, **overrides: Any) -> Candidate:
        c = Candidate(kube, identity, **overrides)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()


def lease(kube: FakeKubeApi) -> dict[str, Any]:
    obj = kube.get("leases", LEASE_NS, LEASE)
    assert obj is not None
    return obj


@asynccontextmanager
async def never_two_leaders(*cands: Candidate) -> AsyncIterator[list[int]]:
    """Sample is_leader of all candidates at every turn of the event loop meanwhile."""
    samples = [0]
    stop = asyncio.Event()
    overlap: list[str] = []

    async def sample() -> None:
        while not stop.is_set():
            leaders = [c.elector.identity for c in cands if c.is_leader]
            if len(leaders) > 1:
                overlap.append(",".join(leaders))
            samples[0] += 1
            await asyncio.sleep(0.002)

    task = asyncio.create_task(sample())
    try:
        yield samples
    finally:
        stop.set()
        await task
    assert overlap == [], f"two leaders at once: {overlap[:3]}"


async def test_single_elector_acquires_and_renews(kube: FakeKubeApi, candidates) -> None:
    a = candidates("a")
    assert not a.is_leader
    await a.lead()
    assert a.changes == [True]
    spec = lease(kube)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    assert spec["renewTime"].endswith("Z") and len(spec["renewTime"]) == 27
    first_renew = spec["renewTime"]
    # renews every retry period without reading first
    puts = kube.count("PUT", "leases")
    await eventually(lambda: kube.count("PUT", "leases") >= puts + 3, within=3, message="renewals")
    assert lease(kube)["spec"]["renewTime"] > first_renew
    assert lease(kube)["spec"]["acquireTime"] == spec["acquireTime"]
    assert a.is_leader and a.changes == [True]


async def test_follower_waits_while_leader_renews(kube: FakeKubeApi, candidates) -> None:
    a, b = candidates("a"), candidates("b")
    await a.lead()
    gets = kube.count("GET", "leases")
    b.start()
    async with never_two_leaders(a, b):
        # b polls every retry period; 20 polls span twice the lease duration
        await eventually(
            lambda: kube.count("GET", "leases") >= gets + 20,
            within=6,
            message="b polls for two lease durations",
        )
        assert a.is_leader and not b.is_leader
    assert b.changes == []
    assert lease(kube)["spec"]["holderIdentity"] == "a"


async def test_cancel_releases_and_successor_takes_over_fast(kube: FakeKubeApi, candidates) -> None:
    a, b = candidates("a"), candidates("b")
    await a.lead()
    b.start()
    async with never_two_leaders(a, b) as samples:
        await eventually(lambda: kube.count("GET", "leases") >= 3, within=3, message="b polls")
        started = time.monotonic()
        await a.stop()
        assert not a.is_leader and a.changes == [True, False]
        released = lease(kube)["spec"]
        assert released["holderIdentity"] in ("", "b")  # b may already have taken it
        await eventually(lambda: b.is_leader, within=3, message="b leads")
        # well under one lease duration: the release, not expiry, handed it over
        assert time.monotonic() - started < DURATION * 0.8
    assert samples[0] > 10
    spec = lease(kube)["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert b.changes == [True]


async def test_release_leaves_an_empty_short_lease(kube: FakeKubeApi, candidates) -> None:
    a = candidates("a")
    await a.lead()
    await a.stop()
    spec = lease(kube)["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1


async def test_release_with_a_stale_copy_rereads_the_lease(kube: FakeKubeApi, candidates) -> None:
    a = candidates("a", lease_retry_period_seconds=0.5)  # no renew between the two steps
    await a.lead()
    # another writer touches the Lease (holder unchanged): a's copy is now stale
    kube.patch("leases", LEASE_NS, LEASE, {"metadata": {"labels": {"team": "ml"}}})
    await a.stop()
    released = lease(kube)
    assert released["spec"]["holderIdentity"] == ""
    assert released["metadata"]["labels"] == {"team": "ml"}  # replace kept the metadata


async def test_release_never_clobbers_a_lease_taken_by_another(
    kube: FakeKubeApi, candidates
) -> None:
    a = candidates("a", lease_retry_period_seconds=0.5)
    await a.lead()
    current = lease(kube)
    current["spec"]["holderIdentity"] = "intruder"
    kube.put(current)
    await a.stop()
    assert lease(kube)["spec"]["holderIdentity"] == "intruder"
    assert a.changes == [True, False]


async def test_crashed_leader_is_replaced_after_the_lease_expires(
    kube: FakeKubeApi, candidates
) -> None:
    a, b = candidates("a"), candidates("b")
    await a.lead()
    b.start()
    async with never_two_leaders(a, b):
        await eventually(lambda: kube.count("GET", "leases") >= 2, within=3, message="b polls")
        # a loses its connection to the API: it cannot renew and cannot release
        await a.client.close()
        crashed = time.monotonic()
        await eventually(lambda: not a.is_leader, within=3, message="a steps down")
        assert time.monotonic() - crashed <= DEADLINE + 0.2
        await eventually(lambda: b.is_leader, within=5, message="b leads")
        # b waited for the lease to stand still for a full duration
        assert time.monotonic() - crashed >= DURATION - RETRY
    assert a.changes == [True, False]
    assert lease(kube)["spec"]["holderIdentity"] == "b"


async def test_failing_renewals_end_leadership_within_the_deadline(
    kube: FakeKubeApi, candidates
) -> None:
    a = candidates("a")
    await a.lead()
    kube.fail_next("PUT", r"/leases/", 500, times=1000)
    kube.fail_next("GET", r"/leases/", 500, times=1000)
    failing = time.monotonic()
    await eventually(lambda: not a.is_leader, within=3, message="a steps down")
    assert time.monotonic() - failing <= DEADLINE + 0.1
    await eventually(lambda: a.changes == [True, False], within=1, message="a reports")
    # once the API recovers, the lease still names a: it takes it back
    kube.clear_faults()
    await eventually(lambda: a.is_leader, within=3, message="a leads again")
    assert a.changes == [True, False, True]


async def test_hanging_renewal_ends_leadership_at_the_deadline(
    kube: FakeKubeApi, candidates
) -> None:
    a = candidates("a", kube_request_timeout_seconds=30)
    await a.lead()
    kube.fail_next("PUT", r"/leases/", 0, delay=10.0)
    hanging = time.monotonic()
    await eventually(lambda: a.changes == [True, False], within=3, message="a reports loss")
    assert time.monotonic() - hanging <= DEADLINE + 0.2


async def test_conflicting_renewal_is_retried(kube: FakeKubeApi, candidates) -> None:
    a = candidates("a")
    await a.lead()
    kube.fail_next("PUT", r"/leases/", 409)
    puts = kube.count("PUT", "leases")
    await eventually(
        lambda: kube.count("PUT", "leases") >= puts + 4,
        within=3,
        message="renewals after the conflict",
    )
    assert a.is_leader and a.changes == [True]
    assert lease(kube)["spec"]["holderIdentity"] == "a"


async def test_lease_taken_by_another_writer_ends_leadership_at_once(
    kube: FakeKubeApi, candidates
) -> None:
    a = candidates("a")
    await a.lead()
    current = lease(kube)
    current["spec"]["holderIdentity"] = "intruder"
    current["spec"]["leaseTransitions"] = 7
    kube.put(current)
    taken = time.monotonic()
    await eventually(lambda: not a.is_leader, within=3, message="a steps down")
    # noticed at its next renew (a 409), not at the renew deadline
    assert time.monotonic() - taken < DEADLINE
    assert lease(kube)["spec"]["holderIdentity"] == "intruder"
    # the intruder never renews: after a full lease duration a takes over again
    await eventually(lambda: a.is_leader, within=4, message="a leads again")
    assert time.monotonic() - taken >= DURATION - RETRY
    spec = lease(kube)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseTransitions"] == 8


async def test_two_candidates_starting_together_elect_one(kube: FakeKubeApi, candidates) -> None:
    cands = [candidates(name) for name in ("a", "b", "c")]
    async with never_two_leaders(*cands):
        for c in cands:
            c.start()
        await eventually(lambda: any(c.is_leader for c in cands), within=3, message="a leader")
        gets = kube.count("GET", "leases")
        await eventually(
            lambda: kube.count("GET", "leases") >= gets + 15, within=5, message="followers poll"
        )
    leaders = [c for c in cands if c.is_leader]
    assert len(leaders) == 1
    assert lease(kube)["spec"]["holderIdentity"] == leaders[0].elector.identity


def test_renew_deadline_must_be_below_duration() -> None:
    # checked once, where the leader's options are made: every elector has valid ones
    s = settings().leader_options()
    with pytest.raises(ValueError, match="lease_renew_deadline_seconds must be below"):
        replace(s, lease_renew_deadline_seconds=s.lease_duration_seconds)
    with pytest.raises(ValidationError, match="lease_renew_deadline_seconds must be below"):
        settings(lease_renew_deadline_seconds=20.0, lease_duration_seconds=15.0)


async def test_always_leader_runs_until_cancelled() -> None:
    seen: list[bool] = []
    leader = AlwaysLeader(on_change=seen.append)
    assert leader.is_leader
    task = asyncio.create_task(leader.run())
    await asyncio.sleep(0)
    assert seen == [True] and not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_make_elector_follows_settings(kube: FakeKubeApi) -> None:
    async with ApiClient(kube.configuration()) as client:
        assert isinstance(
            make_elector(settings(leader_election=False).leader_options(), client), AlwaysLeader
        )
        elector = make_elector(settings(identity="pod-0").leader_options(), client)
        assert isinstance(elector, LeaderElector) and elector.identity == "pod-0"
        other = make_elector(settings().leader_options(), client)
        assert isinstance(other, LeaderElector) and other.identity
        assert other.identity != make_elector(settings().leader_options(), client).identity


async def test_cancel_at_any_point_of_a_renew_ends_the_elector(
    kube: FakeKubeApi, candidates
) -> None:
    # Python 3.11's asyncio.wait_for returns the result when a cancel lands in the turn
    # between the request finishing and wait_for resuming, swallowing the cancel: the
    # elector then renewed forever and shutdown hung. Cancel at every turn of the loop
    # across a whole renew to hit that window.
    for turns in range(200):
        a = candidates(f"a{turns}", lease_retry_period_seconds=0.001)
        a.start()
        for _ in range(turns):
            await asyncio.sleep(0)
        assert a.task is not None
        a.task.cancel()
        done, _ = await asyncio.wait({a.task}, timeout=5)
        assert done, f"elector ignored a cancel after {turns} turns"
        assert a.task.cancelled(), f"elector swallowed a cancel after {turns} turns"
        assert not a.is_leader


@pytest.mark.parametrize("fence", [True, False])
async def test_no_write_of_a_cut_off_leader_lands_once_another_holds_the_lease(
    kube: FakeKubeApi, candidates, fence: bool
) -> None:
    """Two replicas. The leader sends a resize; its connection hangs (the API server
    holds the request 2 s, then applies it unless the client hung up) and its renews
    stop (a partition). The other replica takes the Lease once the record stood still a
    lease duration. Fenced (the daemon's wiring), the write is cancelled when the Lease
    runs out (less its margin), before the other replica can hold it, and never lands.
    Unfenced (the control), the same write lands after the other replica leads."""
    from test_actuator import decide, job, plan

    from autoscaler.act.actuator import KubeActuator
    from autoscaler.act.results import Outcome

    stored = kube.put(job("j", replicas=2, ns="team-a"))
    cut = asyncio.Event()

    async def sleep(seconds: float) -> None:  # a's renews, until the partition
        await asyncio.sleep(seconds)
        if cut.is_set():
            await asyncio.Event().wait()

    a_client = ApiClient(kube.configuration())
    a = LeaderElector(settings().leader_options(), a_client, "a", sleep=sleep)
    a_task = asyncio.create_task(a.run())
    actuator = KubeActuator(settings().actuator_options(), a_client)
    if fence:
        actuator.lease_left = a.lease_left
    b = candidates("b")
    try:
        await eventually(lambda: a.is_leader, within=3, message="a leads")
        b.start()
        kube.fail_next("PATCH", r"/pytorchjobs/j$", 0, delay=2.0)
        cut.set()
        applying = asyncio.create_task(
            actuator.apply(
                plan(decide(stored, 4)), datetime.now(UTC), may_write=lambda: a.is_leader
            )
        )
        await eventually(lambda: b.is_leader, within=3, message="b takes over")
        led_at = time.monotonic()
        result = await applying

        def replicas() -> int:
            found = kube.get("pytorchjobs", "team-a", "j")
            assert found is not None
            return int(found["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])

        if fence:
            (r,) = result.results
            assert r.outcome is Outcome.NOT_LEADER and "Lease" in r.message, r
            await eventually(lambda: kube.delayed_now == 0, within=5, message="request ended")
            assert replicas() == 2  # nothing landed, before or after b led
        else:
            await eventually(lambda: replicas() == 4, within=5, message="the late write")
            assert time.monotonic() >= led_at  # it landed under b's Lease
    finally:
        a_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await a_task
        await a_client.close()
