"""The actuator against a fake API server that speaks HTTP to the real kubernetes_asyncio."""

from __future__ import annotations

import asyncio
import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from builders import vcjob
from fakekube import FakeKubeApi
from kubernetes_asyncio.client import ApiClient

from autoscaler.act.actuator import KubeActuator
from autoscaler.act.dry_run import DryRunActuator
from autoscaler.act.pacing import Pacer
from autoscaler.act.results import ApplyResult, Outcome, refusal
from autoscaler.core.model import Decision, ObjectRef, Plan
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339
from autoscaler.settings import Settings

NOW = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
NS = "team-a"


def settings(**overrides: object) -> Settings:
    base: dict[str, object] = {"identity": "autoscaler-test-0", "kube_request_timeout_seconds": 2}
    base.update(overrides)
    return Settings(**base)


def job(name: str, replicas: int = 2, ns: str = NS) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns, "annotations": {"team": "vision"}},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 8},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1},
                "Worker": {"replicas": replicas, "restartPolicy": "OnFailure"},
            },
        },
    }


def decide(
    stored: dict,
    target: int,
    *,
    reason: Reason = Reason.SCALE_UP_IDLE_GPUS,
    rv: str | None = None,
    kind: str = "PyTorchJob",
    lo: int | None = 1,
    hi: int | None = 8,
) -> Decision:
    meta = stored["metadata"]
    current = stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    return Decision(
        ref=ObjectRef(meta["namespace"], meta["name"], kind=kind, uid=meta.get("uid", "")),
        queue="vision",
        current=current,
        target=target,
        reason=reason,
        message=f"{abs(target - current)} workers",
        min_replicas=lo,
        max_replicas=hi,
        gpus_per_worker=1,
        resource_version=meta["resourceVersion"] if rv is None else rv,
    )


def plan(*decisions: Decision) -> Plan:
    return Plan(now=NOW, decisions=tuple(decisions))


def replicas(kube: FakeKubeApi, name: str) -> int:
    obj = kube.get("pytorchjobs", NS, name)
    assert obj is not None
    return obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]


def grow_vcjob(ref: ObjectRef, vc: dict) -> Decision:
    """The resize 2 -> 4 of the Volcano Job `vc` (as the fake server holds it)."""
    return Decision(
        ref=ref,
        queue="vision",
        current=2,
        target=4,
        reason=Reason.SCALE_UP_IDLE_GPUS,
        message="2 workers",
        min_replicas=1,
        max_replicas=8,
        gpus_per_worker=1,
        resource_version=vc["metadata"]["resourceVersion"],
        workers_at="0:worker",
    )


def outcomes(result: ApplyResult) -> list[Outcome]:
    return [r.outcome for r in result.results]


@pytest.fixture
async def kube():
    async with FakeKubeApi() as api:
        yield api


@pytest.fixture
async def api_client(kube: FakeKubeApi):
    async with ApiClient(kube.configuration()) as client:
        yield client


@pytest.fixture
def actuator(api_client: ApiClient) -> KubeActuator:
    return KubeActuator(settings().actuator_options(), api_client)


async def test_empty_plan_makes_no_request(kube: FakeKubeApi, actuator: KubeActuator) -> None:
    stored = kube.put(job("a"))
    hold = Decision(
        ref=ObjectRef(NS, "a"),
        queue="vision",
        current=2,
        target=2,
        reason=Reason.COOLDOWN,
        message="cooling down",
        min_replicas=1,
        max_replicas=8,
        resource_version=stored["metadata"]["resourceVersion"],
    )
    kube.reset_requests()
    for p in (plan(), plan(hold)):
        result = await actuator.apply(p, NOW)
        assert result.results == ()
    assert kube.requests == []


async def test_grow_patches_replicas_with_merge_patch_and_records_event(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    stored = kube.put(job("a", replicas=2))
    rv = stored["metadata"]["resourceVersion"]
    kube.reset_requests()

    result = await actuator.apply(plan(decide(stored, 4)), NOW)

    assert outcomes(result) == [Outcome.APPLIED]
    assert result.results[0].message == ""
    assert result.count(Outcome.APPLIED) == 1 and result.ok
    after = kube.get("pytorchjobs", NS, "a")
    assert after is not None
    assert after["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    # the merge patch kept what it did not name
    assert after["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert after["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    annotations = after["metadata"]["annotations"]
    assert annotations["team"] == "vision"
    assert annotations["elastic-autoscaler.io/last-scale-time"] == "2026-11-22T10:00:00Z"
    assert annotations["elastic-autoscaler.io/last-scale-reason"] == "ScaleUpIdleGpus"

    (patch,) = [r for r in kube.requests if r.verb == "patch"]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.path == f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/a"
    assert patch.body["metadata"]["resourceVersion"] == rv

    (event,) = kube.objects("events", NS)
    assert event["reason"] == "ScaleUpIdleGpus"
    assert event["message"] == "Worker replicas 2 -> 4: 2 workers"
    assert event["type"] == "Normal"
    involved = event["involvedObject"]
    assert involved["kind"] == "PyTorchJob" and involved["apiVersion"] == "kubeflow.org/v1"
    assert (involved["namespace"], involved["name"]) == (NS, "a")
    assert involved["uid"] == stored["metadata"]["uid"]
    assert involved["resourceVersion"] == after["metadata"]["resourceVersion"] != rv
    assert event["source"]["component"] == "elastic-autoscaler"
    assert event["reportingComponent"] == "elastic-autoscaler"
    assert event["reportingInstance"] == "autoscaler-test-0"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-11-22T10:00:00Z"
    assert event["count"] == 1
    assert event["metadata"]["name"].startswith("a.")
    assert [r.verb for r in kube.requests] == ["patch", "create"]


async def test_shrink_records_its_reason(kube: FakeKubeApi, actuator: KubeActuator) -> None:
    stored = kube.put(job("a", replicas=6))
    result = await actuator.apply(plan(decide(stored, 3, reason=Reason.RECLAIM_FOR_PENDING)), NOW)
    assert outcomes(result) == [Outcome.APPLIED]
    assert replicas(kube, "a") == 3
    after = kube.get("pytorchjobs", NS, "a")
    assert after is not None
    reason = after["metadata"]["annotations"]["elastic-autoscaler.io/last-scale-reason"]
    assert reason == "ReclaimForPending"
    (event,) = kube.objects("events", NS)
    assert event["reason"] == "ReclaimForPending"
    assert event["message"].startswith("Worker replicas 6 -> 3")


async def test_a_warning_is_one_warning_event_on_the_job_said_once(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    """A decision's warning for the job's owner (a queue annotation its operator does not
    honour) becomes a Warning Event on the job beside the resize's own, and is not said
    again while it stands; a changed warning is said again; a follower says nothing."""
    stored = kube.put(job("a", replicas=2))
    warned = replace(decide(stored, 4), warnings=("annotation says q1, runs in default",))
    await actuator.apply(plan(warned), NOW)
    events = sorted(kube.objects("events", NS), key=lambda e: e["type"])
    assert [(e["type"], e["reason"]) for e in events] == [
        ("Normal", "ScaleUpIdleGpus"),
        ("Warning", "QueueAnnotationIgnored"),
    ]
    assert events[1]["message"] == "annotation says q1, runs in default"
    assert events[1]["involvedObject"]["name"] == "a"
    held = replace(warned, target=warned.current)
    await actuator.apply(plan(held), NOW + timedelta(seconds=5))
    assert len(kube.objects("events", NS)) == 2
    changed = replace(held, warnings=("annotation says q2, runs in default",))
    await actuator.apply(plan(changed), NOW + timedelta(seconds=10), may_write=lambda: False)
    assert len(kube.objects("events", NS)) == 2
    await actuator.apply(plan(changed), NOW + timedelta(seconds=15))
    assert kube.objects("events", NS)[-1]["message"] == "annotation says q2, runs in default"
    assert len(kube.objects("events", NS)) == 3


async def test_stale_resource_version_is_a_conflict_and_leaves_job_alone(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    stored = kube.put(job("a", replicas=2))
    kube.patch("pytorchjobs", NS, "a", {"metadata": {"labels": {"touched": "yes"}}})
    kube.reset_requests()

    result = await actuator.apply(plan(decide(stored, 4)), NOW)

    assert outcomes(result) == [Outcome.CONFLICT]
    assert "409" in result.results[0].message
    assert replicas(kube, "a") == 2
    assert kube.objects("events") == []
    # a conflict is not a failure to back off from: the next cycle tries again
    assert actuator.backoff_until(ObjectRef(NS, "a")) is None
    fresh = kube.get("pytorchjobs", NS, "a")
    assert fresh is not None
    again = await actuator.apply(plan(decide(fresh, 4)), NOW + timedelta(seconds=1))
    assert outcomes(again) == [Outcome.APPLIED]
    assert replicas(kube, "a") == 4


async def test_a_volcano_job_changed_since_read_is_a_conflict_not_a_refusal(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    """A Volcano Job is resized by a JSON patch that tests the resourceVersion planned on;
    the API server answers a failed test 422. The job changed: a conflict, planned again
    next cycle, never HoldRefused."""
    vc = kube.put(vcjob("a", NS, replicas=2, max_replicas=8))
    kube.patch("jobs", NS, "a", {"metadata": {"labels": {"touched": "yes"}}})
    ref = ObjectRef(NS, "a", "Job", uid=vc["metadata"]["uid"])
    resize = grow_vcjob(ref, vc)
    result = await actuator.apply(plan(resize), NOW)
    assert outcomes(result) == [Outcome.CONFLICT], result.results
    assert "422" in result.results[0].message
    assert actuator.refusals(NOW) == ()
    assert actuator.backoff_until(ref) is None


async def test_deleted_job_is_gone(kube: FakeKubeApi, actuator: KubeActuator) -> None:
    stored = kube.put(job("a"))
    kube.delete("pytorchjobs", NS, "a")
    result = await actuator.apply(plan(decide(stored, 4)), NOW)
    assert outcomes(result) == [Outcome.GONE]
    assert kube.get("pytorchjobs", NS, "a") is None
    assert kube.count(verb="create") == 0  # no Event about a job that is gone
    assert actuator.backoff_until(ObjectRef(NS, "a")) is None


async def test_a_throttled_write_past_the_budget_is_carried_and_waits_its_retry_after(
    kube: FakeKubeApi, api_client: ApiClient
) -> None:
    """Retry-After 100 s does not fit this cycle's write budget (half its deadline): the
    write is carried, the loop is told when to come back, and no cycle before that sends
    it again (the pacer's clock is injected: no waiting here)."""
    t = [1000.0]
    actuator = KubeActuator(
        settings().actuator_options(), api_client, pacer=Pacer(8, clock=lambda: t[0])
    )
    stored = kube.put(job("a"))
    kube.fail_next("PATCH", r"/pytorchjobs/a$", 429, retry_after=100)

    first = await actuator.apply(plan(decide(stored, 4)), NOW)
    assert outcomes(first) == [Outcome.THROTTLED]
    assert not first.ok  # throttled with nothing landed: no progress
    assert first.retry_in == 100 and first.throttles == 1
    assert first.window == 4  # halved
    assert actuator.backoff_until(ObjectRef(NS, "a")) is None  # the server's state, not the job's

    kube.reset_requests()
    t[0] += 50
    within = await actuator.apply(plan(decide(stored, 4)), NOW + timedelta(seconds=50))
    assert outcomes(within) == [Outcome.DEFERRED]
    assert within.retry_in == 50
    assert kube.requests == []
    assert replicas(kube, "a") == 2

    t[0] += 50
    after = await actuator.apply(plan(decide(stored, 4)), NOW + timedelta(seconds=100))
    assert outcomes(after) == [Outcome.APPLIED]
    assert after.retry_in is None
    assert replicas(kube, "a") == 4


async def test_server_error_backs_off_one_job_while_others_proceed(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    a, b = kube.put(job("a")), kube.put(job("b"))
    kube.fail_next("PATCH", r"/pytorchjobs/a$", 500, times=2)

    result = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)
    assert outcomes(result) == [Outcome.ERROR, Outcome.APPLIED]
    assert "500" in result.results[0].message
    assert (replicas(kube, "a"), replicas(kube, "b")) == (2, 3)
    # b landed while a failed: the server works, a's failure is its own
    assert actuator.backoff_until(ObjectRef(NS, "a")) == NOW + timedelta(seconds=10)

    # within the backoff: no request for a
    kube.reset_requests()
    t1 = NOW + timedelta(seconds=9)
    held = await actuator.apply(plan(decide(a, 4)), t1)
    assert outcomes(held) == [Outcome.BACKOFF]
    assert kube.requests == []

    # the second consecutive failure (b landed just before) doubles the wait
    t2 = NOW + timedelta(seconds=10)
    second = await actuator.apply(plan(decide(a, 4)), t2)
    assert outcomes(second) == [Outcome.ERROR]
    assert actuator.backoff_until(ObjectRef(NS, "a")) == t2 + timedelta(seconds=20)

    t3 = t2 + timedelta(seconds=20)
    third = await actuator.apply(plan(decide(a, 4)), t3)
    assert outcomes(third) == [Outcome.APPLIED]
    assert replicas(kube, "a") == 4


async def test_backoff_is_kept_per_object_kind_included(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    """Back-off belongs to one object, kind and API group included: a PyTorchJob whose
    own writes fail must not hold a Volcano Job (nor a PaddleJob) of the same name in
    the same namespace."""
    torch, other = kube.put(job("a")), kube.put(job("b"))
    vc = kube.put(vcjob("a", NS, replicas=2, max_replicas=8))
    kube.fail_next("PATCH", r"/pytorchjobs/a$", 500, times=1)
    failed = await actuator.apply(plan(decide(torch, 4), decide(other, 3)), NOW)
    assert outcomes(failed) == [Outcome.ERROR, Outcome.APPLIED]  # the PyTorchJob's own
    torch_ref = ObjectRef(NS, "a", "PyTorchJob")
    assert actuator.backoff_until(torch_ref) == NOW + timedelta(seconds=10)
    vc_ref = ObjectRef(NS, "a", "Job", uid=vc["metadata"]["uid"])
    assert actuator.backoff_until(vc_ref) is None
    assert actuator.backoff_until(ObjectRef(NS, "a", "PaddleJob")) is None

    resize = grow_vcjob(vc_ref, vc)
    later = NOW + timedelta(seconds=1)  # within the PyTorchJob's back-off
    result = await actuator.apply(plan(resize, decide(torch, 4)), later)
    assert outcomes(result) == [Outcome.APPLIED, Outcome.BACKOFF], result.results
    stored = kube.get("jobs", NS, "a")
    assert stored is not None and stored["spec"]["tasks"][0]["replicas"] == 4


async def test_backoff_is_capped(kube: FakeKubeApi, actuator: KubeActuator) -> None:
    """A job whose writes fail while another's land (its own trouble, e.g. a webhook)."""
    stored, other = kube.put(job("a")), kube.put(job("b"))
    kube.fail_next("PATCH", r"/pytorchjobs/a$", 500, times=10)
    now = NOW
    waits = []
    for step in range(7):
        b = decide(other, 3 + step % 2, rv="")  # lands every time
        result = await actuator.apply(plan(decide(stored, 4), b), now)
        assert outcomes(result) == [Outcome.ERROR, Outcome.APPLIED]
        until = actuator.backoff_until(ObjectRef(NS, "a"))
        assert until is not None
        waits.append((until - now).total_seconds())
        now = until
    assert waits == [10, 20, 40, 80, 160, 300, 300]


async def test_a_failing_server_pauses_every_write_and_no_job_backs_off(
    kube: FakeKubeApi, api_client: ApiClient
) -> None:
    """Every write fails and none lands: the server's failure. All writes pause (1 s
    doubling, capped), one probe goes when a pause ends, and when the server writes again
    no job is left backing off from the outage."""
    t = [1000.0]
    actuator = KubeActuator(
        settings().actuator_options(), api_client, pacer=Pacer(8, clock=lambda: t[0])
    )
    a, b = kube.put(job("a")), kube.put(job("b"))
    kube.fail_next("PATCH", r"/pytorchjobs/", 503, times=7)
    first = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)
    assert outcomes(first) == [Outcome.ERROR, Outcome.ERROR]  # both were in flight
    assert first.retry_in == 1
    t[0] += 1
    pauses = []
    for _ in range(5):
        kube.reset_requests()
        result = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)
        assert sorted(outcomes(result)) == sorted([Outcome.ERROR, Outcome.DEFERRED])
        assert kube.count(verb="patch") == 1  # one probe at a time, nothing piled on
        assert result.retry_in is not None
        pauses.append(result.retry_in)
        assert actuator.backoff_until(ObjectRef(NS, "a")) is None
        assert actuator.backoff_until(ObjectRef(NS, "b")) is None
        # paused: the next cycle before it ends sends nothing
        early = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)
        assert outcomes(early) == [Outcome.DEFERRED] * 2 and kube.count(verb="patch") == 1
        t[0] += result.retry_in
    assert pauses == [2, 4, 8, 16, 30]
    back = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)
    assert outcomes(back) == [Outcome.APPLIED, Outcome.APPLIED]
    assert (replicas(kube, "a"), replicas(kube, "b")) == (4, 3)


async def test_writes_resume_as_soon_as_the_server_answers_a_read_again(
    kube: FakeKubeApi, api_client: ApiClient
) -> None:
    """An outage doubled the write pause to 16 s; the API server comes back and a watch
    cache is answered (server_answered): the next cycle probes at once and both resizes
    land, not 16 s later. A throttle's pause is not lifted so."""
    t = [1000.0]
    pacer = Pacer(8, clock=lambda: t[0])
    actuator = KubeActuator(settings().actuator_options(), api_client, pacer=pacer)
    a, b = kube.put(job("a")), kube.put(job("b"))
    for _ in range(5):
        pacer.unavailable(pacer.ticket())
    assert pacer.down and pacer.retry_in() == 16
    t[0] += 0.5
    paused = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)
    assert outcomes(paused) == [Outcome.DEFERRED] * 2 and kube.count(verb="patch") == 0
    pacer.server_answered()
    assert pacer.retry_in() == 0 and pacer.down and pacer.slots == 1  # one probe first
    back = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)
    assert outcomes(back) == [Outcome.APPLIED, Outcome.APPLIED]
    assert not pacer.down
    # a throttle at a window of one pauses for its Retry-After: an answer keeps it
    pacer.window = 1.0
    pacer.throttled(pacer.ticket(), 5.0)
    pacer.server_answered()
    assert pacer.retry_in() == 5.0


async def test_timeout_is_an_error_and_the_plan_goes_on(
    kube: FakeKubeApi, api_client: ApiClient
) -> None:
    actuator = KubeActuator(
        settings(kube_request_timeout_seconds=0.2).actuator_options(), api_client
    )
    a, b = kube.put(job("a")), kube.put(job("b"))
    kube.fail_next("PATCH", r"/pytorchjobs/a$", 0, delay=5.0)

    result = await actuator.apply(plan(decide(a, 4), decide(b, 3)), NOW)

    assert outcomes(result) == [Outcome.ERROR, Outcome.APPLIED]
    assert "timed out" in result.results[0].message
    assert replicas(kube, "b") == 3
    assert actuator.backoff_until(ObjectRef(NS, "a")) == NOW + timedelta(seconds=10)


async def test_leadership_lost_mid_plan_stops_all_writes(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    jobs = [kube.put(job(n)) for n in ("a", "b", "c")]
    kube.reset_requests()
    calls: list[bool] = []

    def may_write() -> bool:
        # leads for the first patch only; lost before its Event
        calls.append(len(calls) < 1)
        return calls[-1]

    result = await actuator.apply(plan(*(decide(j, 4) for j in jobs)), NOW, may_write)

    assert outcomes(result) == [Outcome.APPLIED, Outcome.NOT_LEADER, Outcome.NOT_LEADER]
    assert "leadership lost" in result.results[0].message
    assert [r.verb for r in kube.requests] == ["patch"]
    assert [replicas(kube, n) for n in ("a", "b", "c")] == [4, 2, 2]


async def test_not_leader_from_the_start_writes_nothing(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    a = kube.put(job("a"))
    kube.reset_requests()
    result = await actuator.apply(plan(decide(a, 4)), NOW, lambda: False)
    assert outcomes(result) == [Outcome.NOT_LEADER]
    assert kube.requests == []


@pytest.mark.parametrize(
    ("target", "kind", "lo", "hi", "why"),
    [
        (9, "PyTorchJob", 1, 8, "outside [1, 8]"),
        (0, "PyTorchJob", 1, 8, "outside [1, 8]"),
        (4, "MPIJob", 1, 8, "not one we manage"),
        (4, "PyTorchJob", None, 8, "no min/max"),
    ],
)
async def test_out_of_range_or_foreign_decision_is_refused(
    kube: FakeKubeApi,
    actuator: KubeActuator,
    target: int,
    kind: str,
    lo: int | None,
    hi: int | None,
    why: str,
) -> None:
    a, b = kube.put(job("a")), kube.put(job("b"))
    kube.reset_requests()
    bad = decide(a, target, kind=kind, lo=lo, hi=hi)
    result = await actuator.apply(plan(bad, decide(b, 3)), NOW)
    assert outcomes(result) == [Outcome.REFUSED, Outcome.APPLIED]
    assert why in result.results[0].message
    assert not result.ok
    assert [r.name for r in kube.requests if r.verb == "patch"] == ["b"]
    assert replicas(kube, "a") == 2


def test_refusal_of_missing_target() -> None:
    d = Decision(
        ref=ObjectRef(NS, "a"),
        queue="q",
        current=2,
        target=None,
        reason=Reason.SCALE_UP_IDLE_GPUS,
        message="",
        min_replicas=1,
        max_replicas=4,
    )
    assert refusal(d) is not None
    ok = Decision(
        ref=ObjectRef(NS, "a"),
        queue="q",
        current=2,
        target=4,
        reason=Reason.SCALE_UP_IDLE_GPUS,
        message="",
        min_replicas=1,
        max_replicas=4,
    )
    assert refusal(ok) is None


async def test_event_failure_does_not_fail_the_action(
    kube: FakeKubeApi, actuator: KubeActuator
) -> None:
    a = kube.put(job("a"))
    kube.fail_next("POST", r"/events$", 500)
    result = await actuator.apply(plan(decide(a, 4)), NOW)
    assert outcomes(result) == [Outcome.APPLIED]
    assert replicas(kube, "a") == 4
    assert actuator.backoff_until(ObjectRef(NS, "a")) is None
    assert result.events_waiting == 1  # the server failed it: carried, not lost
    assert kube.objects("events", NS) == []
    later = await actuator.apply(plan(), NOW)  # no resize: the Event still goes
    assert later.events_waiting == 0
    assert [e["reason"] for e in kube.objects("events", NS)] == ["ScaleUpIdleGpus"]


async def test_cancellation_propagates(kube: FakeKubeApi, actuator: KubeActuator) -> None:
    a = kube.put(job("a"))
    kube.fail_next("PATCH", r"/pytorchjobs/a$", 0, delay=1.5)
    task = asyncio.create_task(actuator.apply(plan(decide(a, 4)), NOW))
    deadline = asyncio.get_running_loop().time() + 5
    while kube.count(verb="patch") == 0:  # the request reached the server
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_dry_run_writes_nothing(kube: FakeKubeApi) -> None:
    a, b = kube.put(job("a")), kube.put(job("b"))
    kube.reset_requests()
    out = io.StringIO()
    dry = DryRunActuator(out)
    result = await dry.apply(plan(decide(a, 4), decide(b, 9)), NOW)
    assert outcomes(result) == [Outcome.DRY_RUN, Outcome.REFUSED]
    assert kube.requests == []
    text = out.getvalue()
    assert f"would scale {NS}/a (queue vision): 2 -> 4 [ScaleUpIdleGpus]" in text
    assert "REFUSED" in text and f"{NS}/b" in text


def test_rfc3339_is_utc_whole_seconds() -> None:
    from datetime import timezone

    east = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 11, 22, 12, 0, 0, 999_000, tzinfo=east)) == (
        "2026-11-22T10:00:00Z"
    )
    assert rfc3339(datetime(2026, 11, 22, 10, 0, 0)) == "2026-11-22T10:00:00Z"


async def test_writes_go_out_in_parallel_up_to_the_bound(
    kube: FakeKubeApi, api_client: ApiClient
) -> None:
    """Each patch is held 0.2 s at the server: the server sees 4 at once, never more."""
    stored = [kube.put(job(f"j{i}")) for i in range(12)]
    for i in range(12):
        kube.fail_next("PATCH", rf"/pytorchjobs/j{i}$", 0, delay=0.2)  # 0: answer, late
    actuator = KubeActuator(settings(max_parallel_writes=4).actuator_options(), api_client)
    result = await actuator.apply(plan(*(decide(s, 4) for s in stored)), NOW)
    assert outcomes(result) == [Outcome.APPLIED] * 12
    assert [r.decision.ref.name for r in result.results] == [f"j{i}" for i in range(12)]
    assert kube.max_delayed == 4  # serial would be 1, unbounded 12


async def test_events_go_beside_the_patches_while_the_server_keeps_up(
    kube: FakeKubeApi, api_client: ApiClient
) -> None:
    """An Event does not take a resize's write slot: with 2 patches allowed in flight and
    every write held 0.2 s at the server, the Events of the first resizes go while the
    next patches are in flight (at most 2 of each), so 4 resizes take 2 rounds of
    patches, not 4 rounds of writes. Once the server throttles they share the window."""
    stored = [kube.put(job(f"j{i}")) for i in range(4)]
    kube.fail_next("PATCH", r"/pytorchjobs/j\d$", 0, times=4, delay=0.2)
    kube.fail_next("POST", r"/events$", 0, times=4, delay=0.2)
    actuator = KubeActuator(settings(max_parallel_writes=2), api_client)
    result = await actuator.apply(plan(*(decide(s, 4) for s in stored)), NOW)
    assert outcomes(result) == [Outcome.APPLIED] * 4
    assert len(kube.objects("events", NS)) == 4
    assert kube.max_delayed == 4  # 2 patches and 2 Events; in one window: 2


async def test_a_429_halves_the_window_and_the_write_goes_again_in_order(
    kube: FakeKubeApi, api_client: ApiClient
) -> None:
    """A 429 does not stop the drain: the throttled write goes again after Retry-After
    (1 s here, kube-apiserver's own), the others go on meanwhile, all land this cycle."""
    stored = [kube.put(job(f"j{i}")) for i in range(6)]
    kube.fail_next("PATCH", r"/pytorchjobs/j0$", 429, retry_after=1)
    actuator = KubeActuator(settings(max_parallel_writes=4).actuator_options(), api_client)
    result = await actuator.apply(plan(*(decide(s, 4) for s in stored)), NOW)
    assert outcomes(result) == [Outcome.APPLIED] * 6
    assert result.ok and result.retry_in is None and result.throttles == 1
    assert result.window is not None and 2 <= result.window < 4
    patched = [r.name for r in kube.requests if r.verb == "patch"]
    assert patched.count("j0") == 2 and patched[-1] == "j0"  # after its Retry-After
    assert [replicas(kube, f"j{i}") for i in range(6)] == [4] * 6


async def test_dry_run_says_each_resize_once_and_again_only_when_it_changes(
    kube: FakeKubeApi,
) -> None:
    """Nothing is written, so every cycle plans the same resizes: a dry run says what
    changed, not every planned resize every cycle."""
    a, b = kube.put(job("a")), kube.put(job("c"))
    out = io.StringIO()
    dry = DryRunActuator(out)
    await dry.apply(plan(decide(a, 4), decide(b, 3)), NOW)
    assert out.getvalue().count("would scale") == 2
    out.truncate(0), out.seek(0)
    result = await dry.apply(plan(decide(a, 4), decide(b, 3)), NOW)
    assert outcomes(result) == [Outcome.DRY_RUN, Outcome.DRY_RUN]  # still reported
    assert out.getvalue() == "(2 resize(s) as in the last cycle, not repeated)\n"
    out.truncate(0), out.seek(0)
    await dry.apply(plan(decide(a, 5), decide(b, 3)), NOW)  # a's target moved
    text = out.getvalue()
    assert f"would scale {NS}/a" in text and "2 -> 5" in text
    assert f"{NS}/c" not in text and "(1 resize(s) as in the last cycle" in text
    out.truncate(0), out.seek(0)
    await dry.apply(plan(decide(a, 5)), NOW)  # c left the plan
    await dry.apply(plan(decide(a, 5), decide(b, 3)), NOW)  # and came back: said again
    assert f"would scale {NS}/c" in out.getvalue()
